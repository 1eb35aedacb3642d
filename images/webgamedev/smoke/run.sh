#!/usr/bin/env bash
# Smoke test of the webgamedev image, run inside it with no network: copy
# the game template, build it (tsc + vite) offline, serve dist/ with vite
# preview on 127.0.0.1 and load it in headless Chromium: no console errors,
# a canvas, a screenshot at /out/game.png.
set -euo pipefail
here=/in/smoke
port=4173

game=$(mktemp -d)/game
cp -r /opt/game-template "$game"
cd "$game"
npm run build --silent >build.log 2>&1 || { cat build.log; exit 1; }
echo "npm run build: dist/ has $(find dist -type f | wc -l) files, $(du -sk dist | cut -f1) KiB"
cp -r dist /out/dist

npm run preview --silent -- --host 127.0.0.1 --port "$port" --strictPort >preview.log 2>&1 &
preview=$!
trap 'kill "$preview" 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
	curl -sf "http://127.0.0.1:$port/" >/dev/null && break
	kill -0 "$preview" 2>/dev/null || { cat preview.log; exit 1; }
	sleep 0.5
done
echo "vite preview: serving on 127.0.0.1:$port"

node "$here/play.mjs" "http://127.0.0.1:$port/" /out/game.png
