#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The images' own smoke tests, and the build script's up-to-date check.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
dir=${DEMESNE_IMAGES_DIR:?DEMESNE_IMAGES_DIR must name the images folder}
for image in base python; do
	out=$(bash "$dir/$image/smoke.sh" 2>&1); rc=$?
	[ $rc = 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
	ok $rc "$image smoke test"
done
out=$(bash "$dir/build.sh" base python 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'python: up to date'
ok $? "build.sh on unchanged inputs is a no-op"
bash "$dir/build.sh" nosuchimage >/dev/null 2>&1; [ $? = 2 ]
ok $? "build.sh refuses an unknown image with a usage error"
echo "1..$n"
echo "images: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
