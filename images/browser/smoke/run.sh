#!/usr/bin/env bash
# Smoke test of the browser image, run inside it with no network: Chromium
# starts, React renders on the server, a React app builds with Vite and its
# page is screenshotted by playwright-core to /out/screenshot.png (640x400).
set -euo pipefail
here=/in/smoke

echo "chromium: $(chromium --version)"
echo "node: $(node --version), vite: $(vite --version)"

# Bare imports of the global packages from a script outside any project.
node --input-type=module -e '
import { renderToString } from "react-dom/server";
import { createElement } from "react";
import { chromium } from "playwright-core";
const html = renderToString(createElement("b", null, "ssr ok"));
if (html !== "<b>ssr ok</b>" || typeof chromium.launch !== "function") process.exit(1);
console.log("react-dom/server: " + html);
'

work=$(mktemp -d)
cp -r "$here/app" "$work/app"
(cd "$work/app" && vite build --outDir dist >/dev/null)
echo "vite build: $(find "$work/app/dist" -type f | wc -l) files"

node "$here/shot.mjs" "$work/app/dist" /out/screenshot.png 640 400
