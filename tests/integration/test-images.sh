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
bash "$dir/build.sh" nosuchimage >/dev/null 2>&1; [ $? = 2 ]
ok $? "build.sh refuses an unknown image with a usage error"
echo "1..$n"
echo "images: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
