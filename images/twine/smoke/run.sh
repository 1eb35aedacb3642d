#!/usr/bin/env bash
# Smoke test of the twine image, run inside it with no network: compile a
# two-passage Twee story with each installed story format and playtest the
# HTML in headless Chromium (click the link, see the second passage).
set -euo pipefail
here=/in/smoke

echo "extwee: $(extwee --version)"
echo "story formats: $(twee --list-formats | cut -f1 | paste -sd' ')"

# The extwee CLI itself, with an explicit format file.
extwee -c -i "$here/story.twee" -s /opt/story-formats/harlowe-3.0.2/format.js -o /out/story-extwee.html >/dev/null
grep -q 'format="Harlowe"' /out/story-extwee.html
echo "extwee -c: story-extwee.html ($(wc -c </out/story-extwee.html) bytes)"

for format in harlowe snowman; do
	twee -f "$format" -o "/out/story-$format.html" "$here/story.twee"
	node "$here/play.mjs" "/out/story-$format.html" "Open the door" "the second passage has been reached"
done
