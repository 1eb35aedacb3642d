#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The build script: its up-to-date check, inputs tags, --list and labels.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
dir=${DEMESNE_IMAGES_DIR:?DEMESNE_IMAGES_DIR must name the images folder}
# (The smoke tests run through sandbox_script: tests/e2e/image-smoke.mjs.)
out=$(bash "$dir/build.sh" base python 2>&1); rc=$?
[ $rc = 0 ] && printf '%s\n' "$out" | grep -q 'python: up to date'
ok $? "build.sh on unchanged inputs is a no-op"
# The hosts the images' package managers use, read from the images at build
# time (apt's sources name deb.debian.org in both).
engine=podman
[ -n "${DEMESNE_ENGINE:-}" ] && engine=$DEMESNE_ENGINE
for image in base python; do
	hosts=$("$engine" image inspect --format '{{index .Config.Labels "demesne.package-hosts"}}' \
		"localhost/demesne/$image:latest" 2>/dev/null)
	case ",$hosts," in *,deb.debian.org,*) r=0 ;; *) r=1 ;; esac
	ok $r "$image carries demesne.package-hosts with its apt host ($hosts)"
done
# Each built image also carries its inputs tag, which --list reports.
line=$(bash "$dir/build.sh" --list 2>/dev/null | awk -F'\t' '$1 == "python"')
tag=$(printf '%s\n' "$line" | cut -f3)
state=$(printf '%s\n' "$line" | cut -f4)
[ "$state" = built ] && [ -n "$tag" ] && "${DEMESNE_ENGINE:-podman}" image exists "localhost/demesne/python:$tag" 2>/dev/null ||
	{ [ "${DEMESNE_ENGINE:-podman}" = docker ] && docker image inspect "localhost/demesne/python:$tag" >/dev/null 2>&1; }
ok $? "build.sh --list says python is built, tagged with its inputs hash ($tag)"
out=$("$DEMESNE" images list 2>/dev/null)
printf '%s\n' "$out" | grep -q "^python .*$tag .* built\$"
ok $? "demesne images list shows python built with its inputs tag"
bash "$dir/build.sh" nosuchimage >/dev/null 2>&1; [ $? = 2 ]
ok $? "build.sh refuses an unknown image with a usage error"
echo "1..$n"
echo "images: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
