import { defineConfig } from 'vite';

// base './': dist/ works from any folder or static host (file paths are
// relative), e.g. an itch.io upload.
export default defineConfig({
  base: './',
  build: { chunkSizeWarningLimit: 2000 },
});
