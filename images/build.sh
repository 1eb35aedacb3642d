#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Build demesne's container images from Debian packages only: no container
# registry is needed (or asked). `base` is bootstrapped with mmdebstrap and
# imported; every other image is a Containerfile FROM base (or FROM another
# of ours). Images are tagged localhost/demesne/<name>:latest.
#
# Each image carries the label demesne.inputs=<sha256 of what defines it>:
# its section of this file (between the ">>> image: NAME" / "<<< image: NAME"
# markers), the files of its folder (smoke.sh excepted: a test does not change
# the image) and its parent's inputs hash. A build is skipped when the tagged
# image already has that hash, so calling this script before every use is
# cheap. A child also records its parent's image id (demesne.parent), so a
# forced rebuild of base makes python stale too.
#
# Each image also carries demesne.package-hosts: the hosts its own package
# managers are configured to use (apt sources, pip, npm, conda and Go
# settings), read from the built image by running it with no network; the
# server's egress package-managers lets them through its proxy. The label is
# added by a second, layer-less build FROM the image, so it describes what
# the image really holds. (v2 of the inputs hash: images built before the
# label existed are rebuilt once.)
#
# The script depends only on the folder it lives in, so it works from a git
# checkout, from $DEMESNE_IMAGES_DIR or from <pkgdatadir>/images, whatever the
# current directory.

# mmdebstrap hooks are single-quoted on purpose: "$1" is the chroot path,
# expanded by the hook's own shell.
# shellcheck disable=SC2016
set -euo pipefail

IMAGES_DIR=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd -P)
readonly IMAGES_DIR
readonly SELF="$IMAGES_DIR/build.sh"
# shellcheck source=images/lib.sh
. "$IMAGES_DIR/lib.sh"

# Every image this script knows, parents before children.
readonly ALL_IMAGES=(base python node go media browser twine webgamedev claude-code codex)

ENGINE=
WORK=

usage() {
	cat <<EOF
usage: build.sh [--engine podman|docker] [--force] NAME...
       build.sh [--engine podman|docker] [--force] --all
       build.sh [--engine podman|docker] --list
       build.sh --help

Builds demesne's container images as $DM_IMAGE_REPO/NAME:latest.
NAME is one of: ${ALL_IMAGES[*]}   (--all builds every one)

A requested image's parents are built first when they are missing or stale.
An image whose inputs hash matches the tagged image is skipped. Each image
is tagged :latest and :<first 12 hex digits of its inputs hash>.
--list prints, per image, tab-separated: name, reference, inputs tag,
state (built, stale: why, missing) and size in bytes; it builds nothing.

  --engine E   podman or docker (default: \$DEMESNE_ENGINE, else podman if it
               is on PATH, else docker)
  --force      rebuild the named images even when they are up to date
  --help       show this text

Environment:
  DEMESNE_DEBIAN_MIRROR           default http://deb.debian.org/debian
  DEMESNE_DEBIAN_SECURITY_MIRROR  default http://deb.debian.org/debian-security

Progress goes to stderr, each line prefixed "images: ". Exit status is
non-zero when any step fails; the last line names the step.
EOF
}

# Bad command line: exit 2, as getopt-style tools do, so callers can tell it
# from a failed build (1).
usage_error() {
	dm_log "error: $*"
	dm_log "usage: build.sh [--engine podman|docker] [--force] NAME... | --all | --help"
	exit 2
}

# Run one build step with its output logged; on failure stop the whole script
# with a message naming the image and the step.
step() {
	local name=$1 what=$2 rc=0
	shift 2
	dm_log "$name: $what"
	dm_run_logged "$name" "$@" || rc=$?
	((rc == 0)) || dm_die "$name: step '$what' failed (exit $rc)"
}

# >>> image: base
# Debian bookworm minbase plus the tools every sandbox command expects.
# Recommends are not installed (mmdebstrap's default), which keeps git from
# pulling in openssh-client, less and patch.
readonly BASE_SUITE=bookworm
readonly BASE_PACKAGES=bash,coreutils,ca-certificates,curl,git,procps

base_parent() { :; }

# The mirrors end up in the image's sources.list, so they are inputs too.
base_extra_inputs() {
	printf 'suite %s\nmirror %s\nsecurity %s\n' "$BASE_SUITE" \
		"$(base_mirror)" "$(base_security_mirror)"
}

base_mirror() { printf '%s\n' "${DEMESNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"; }
base_security_mirror() {
	printf '%s\n' "${DEMESNE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
}

# Write the root filesystem as a tarball to $1.
base_rootfs_tar() {
	local out=$1 mirror security
	mirror=$(base_mirror)
	security=$(base_security_mirror)
	# - The dpkg path excludes are written to /etc/dpkg/dpkg.cfg.d/99mmdebstrap
	#   in the image, so packages installed later (python's layer, or apt-get
	#   inside a sandbox) stay slim too; copyright files are kept for licences.
	# - Acquire::Languages "none": translated descriptions are never read here
	#   and only make `apt-get update` slower inside sandboxes.
	# - mmdebstrap copies the host's resolv.conf and hostname in; the engine
	#   provides both at run time, so the image must not carry the host's.
	# - policy-rc.d exiting 101 keeps `apt-get install` of a daemon inside a
	#   sandbox from trying to start it (there is no init). mmdebstrap puts a
	#   temporary one in place during the build and deletes it afterwards,
	#   taking along any written by a hook; --skip=chroot/policy-rc.d turns
	#   that off and our extract hook installs the permanent one before any
	#   maintainer script runs.
	# - /dev is stripped: the engine mounts its own, and device nodes in the
	#   tarball would break a rootless import.
	mmdebstrap \
		--variant=minbase \
		--format=tar \
		--include="$BASE_PACKAGES" \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/lintian/*' \
		--aptopt='Acquire::Languages "none"' \
		--skip=chroot/policy-rc.d \
		--extract-hook='printf "#!/bin/sh\nexit 101\n" > "$1/usr/sbin/policy-rc.d" && chmod 0755 "$1/usr/sbin/policy-rc.d"' \
		--customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
		--customize-hook='mkdir -p "$1/in" "$1/out" "$1/workspace"' \
		--customize-hook='rm -rf "$1/usr/share/doc-base" "$1/var/cache/debconf/"*-old "$1/var/lib/dpkg/"*-old' \
		"$BASE_SUITE" "$out" \
		"deb $mirror $BASE_SUITE main" \
		"deb $mirror $BASE_SUITE-updates main" \
		"deb $security $BASE_SUITE-security main"
	# GNU tar fails when told to delete absent members, and whether there are
	# device nodes depends on mmdebstrap's mode (root vs unshare). No grep -q:
	# with pipefail, tar's SIGPIPE would read as "no match".
	if tar -tf "$out" | grep '^\./dev/.' >/dev/null; then
		tar --delete --wildcards -f "$out" './dev/?*'
	fi
}

base_build() {
	local ref=$1 hash=$2
	local tar="$WORK/base-rootfs.tar"
	command -v mmdebstrap >/dev/null 2>&1 ||
		dm_die "base: mmdebstrap is not on PATH (Debian: apt-get install mmdebstrap)"
	step base "mmdebstrap $BASE_SUITE rootfs" base_rootfs_tar "$tar"
	# DEBIAN_FRONTEND is set image-wide because sandbox commands never have a
	# terminal: a debconf prompt would only hang or fail.
	step base "$ENGINE import" "$ENGINE" import \
		--change 'CMD ["/bin/bash"]' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'ENV DEBIAN_FRONTEND=noninteractive' \
		--change 'WORKDIR /out' \
		--change 'LABEL demesne.image=base' \
		--change "LABEL demesne.inputs=$hash" \
		"$tar" "$ref"
	rm -f "$tar"
}
# <<< image: base

# >>> image: python
# Debian's scientific Python stack on top of base: see python/Containerfile.
python_parent() { echo base; }
python_build() { build_containerfile python "$@"; }
# <<< image: python

# >>> image: node
# Node.js 22 LTS and npm, both from the npm registry (bookworm's nodejs is 18,
# too old for Vite 7, Playwright and Claude Code): see node/Containerfile.
node_parent() { echo base; }
node_build() { build_containerfile node "$@"; }
# <<< image: node

# >>> image: browser
# Debian's Chromium (bookworm-security) with playwright-core, React, Vite and
# @vitejs/plugin-react from npm, installed globally: see browser/Containerfile.
browser_parent() { echo node; }
browser_build() { build_containerfile browser "$@"; }
# <<< image: browser

# >>> image: twine
# The extwee Twee compiler and Twine 2 story formats from npm packages, under
# /opt/story-formats: see twine/Containerfile.
twine_parent() { echo browser; }
twine_build() { build_containerfile twine "$@"; }
# <<< image: twine

# >>> image: webgamedev
# A Phaser + Vite + TypeScript project with its node_modules installed, at
# /opt/game-template: see webgamedev/Containerfile.
webgamedev_parent() { echo browser; }
webgamedev_build() { build_containerfile webgamedev "$@"; }
# <<< image: webgamedev

# >>> image: go
# The Go toolchain from Debian (bookworm-backports' newest golang-1.NN, as
# bookworm's own is 1.19): see go/Containerfile.
go_parent() { echo base; }
go_build() { build_containerfile go "$@"; }
# <<< image: go

# >>> image: media
# ffmpeg, ImageMagick, libvips, sox and command-line audio codecs, all from
# Debian: see media/Containerfile.
media_parent() { echo base; }
media_build() { build_containerfile media "$@"; }
# <<< image: media

# >>> image: claude-code
# The Claude Code CLI (npm @anthropic-ai/claude-code, fetched on the host by
# stage_npm): see claude-code/Containerfile.
claude-code_parent() { echo node; }
claude-code_build() { build_containerfile claude-code "$@"; }
# <<< image: claude-code

# >>> image: codex
# The OpenAI Codex CLI (npm @openai/codex, fetched on the host by stage_npm):
# see codex/Containerfile.
codex_parent() { echo node; }
codex_build() { build_containerfile codex "$@"; }
# <<< image: codex

# npm packages for an image are fetched here, on the host, not inside the
# build: no registry is reachable from a container on every machine (an
# intercepting TLS proxy's CA is trusted by the host only), and a lock file
# with integrity hashes pins every byte anyway. images/NAME/npm/ holds a
# package.json and package-lock.json; `npm ci` installs them into the build
# context's npm/node_modules with lifecycle scripts off (nothing from the
# registry runs on the host; a Containerfile that needs a package's script
# runs `npm rebuild` inside the image). The npm cache is kept between builds
# in $DEMESNE_NPM_CACHE (default ~/.cache/demesne/npm).
stage_npm() {
	local name=$1 ctx=$2 cache
	[[ -f $ctx/npm/package.json ]] || return 0
	[[ -f $ctx/npm/package-lock.json ]] || dm_die "$name: npm/package.json has no package-lock.json next to it"
	command -v npm >/dev/null 2>&1 || dm_die "$name: npm is not on PATH (Debian: apt-get install npm)"
	cache=${DEMESNE_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demesne/npm}
	mkdir -p "$cache"
	# In the folder (env -C), not with --prefix, which would also move
	# npm's global configuration away from the machine's /usr/etc/npmrc.
	step "$name" "npm ci on the host ($(grep -c '"node_modules/' "$ctx/npm/package-lock.json") packages)" \
		env -C "$ctx/npm" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
		--cache "$cache"
}

# Build images/NAME/Containerfile FROM its parent's tag. $1 name, $2 ref,
# $3 inputs hash, $4 parent image id. The context is a copy of the folder
# (without its smoke test) plus whatever stage_npm fetched.
build_containerfile() {
	local name=$1 ref=$2 hash=$3 parent_id=$4 dir="$WORK/ctx-$1"
	mkdir -p "$dir"
	(cd "$IMAGES_DIR/$name" && find . -mindepth 1 -maxdepth 1 ! -name smoke ! -name smoke.sh \
		! -name node_modules -exec cp -a -t "$dir" {} +)
	rm -rf "$dir/npm/node_modules"
	stage_npm "$name" "$dir"
	local -a args=(
		build --file "$dir/Containerfile" --tag "$ref"
		--build-arg "BASE_IMAGE=$(dm_image_ref "$("${name}_parent")")"
		--label "demesne.image=$name"
		--label "demesne.inputs=$hash"
		--label "demesne.parent=$parent_id"
	)
	# podman: never consult a registry for FROM (a clear error beats a
	# timeout), and commit one layer instead of keeping per-step cache images
	# around; our inputs hash is the cache.
	[[ $ENGINE != podman ]] || args+=(--pull=never --layers=false)
	step "$name" "$ENGINE build" "$ENGINE" "${args[@]}" "$dir"
}

# Print the text between this image's markers in this file.
section_text() {
	local name=$1 text
	text=$(sed -n "/^# >>> image: $name\$/,/^# <<< image: $name\$/p" "$SELF")
	[[ -n $text ]] || dm_die "$name: no '# >>> image: $name' section in $SELF"
	printf '%s\n' "$text"
}

# The inputs hashes computed so far: an image's hash takes its parent's, so
# a listing would otherwise hash base once per image below it.
declare -A INPUTS_HASH=()
# Sets INPUTS_HASH[$1], its parents' first.
hash_inputs() {
	local name=$1 parent
	[[ -z ${INPUTS_HASH[$name]:-} ]] || return 0
	parent=$("${name}_parent")
	[[ -z $parent ]] || hash_inputs "$parent"
	INPUTS_HASH[$name]=$(inputs_hash "$name")
}

# Print the inputs hash of an image (see the header).
inputs_hash() {
	local name=$1 parent section dir="$IMAGES_DIR/$1" rel
	section=$(section_text "$name")
	parent=$("${name}_parent")
	local -a files=()
	if [[ -d $dir ]]; then
		while IFS= read -r -d '' rel; do
			files+=("$rel")
		done < <(cd "$dir" && find . \( -path ./smoke -o -path ./smoke.sh -o -name node_modules \) -prune \
			-o -type f -print0 | LC_ALL=C sort -z)
	fi
	{
		printf 'demesne images inputs v2\nimage %s\n' "$name"
		printf '%s\n' "$section"
		if declare -F "${name}_extra_inputs" >/dev/null; then
			"${name}_extra_inputs"
		fi
		[[ -z $parent ]] || printf 'parent %s %s\n' "$parent" "${INPUTS_HASH[$parent]:-$(inputs_hash "$parent")}"
		for rel in "${files[@]}"; do
			# Name and size delimit each file. Modes are left out on purpose:
			# an installed copy may differ from git's (a Containerfile that
			# needs a mode sets it with COPY --chmod).
			printf 'file %s %s\n' "$rel" "$(stat -c %s "$dir/$rel")"
			cat -- "$dir/$rel"
		done
	} | sha256sum | cut -d' ' -f1
}

# The hosts the image's package managers use, as "a,b,c": run inside the
# image (no network) so that it reads the image's own configuration.
PACKAGE_HOSTS_PROBE='
{
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk "/^deb/ { for (i = 2; i <= NF; i++) if (\$i ~ /:\/\//) { print \$i; break } }"
	cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n "s/^URIs: *//p" | tr " " "\n"
	cat /etc/pip.conf /root/.pip/pip.conf /root/.config/pip/pip.conf 2>/dev/null | sed -n "s/^ *\(extra-\)\{0,1\}index-url *= *//p"
	cat /root/.npmrc /usr/etc/npmrc /etc/npmrc 2>/dev/null | sed -n "s/^ *registry *= *//p"
	command -v npm >/dev/null 2>&1 && echo https://registry.npmjs.org/
	cat /root/.condarc /opt/conda/.condarc 2>/dev/null | sed -n "s/^ *- *\(https\{0,1\}:.*\)/\1/p"
	command -v go >/dev/null 2>&1 && go env GOPROXY 2>/dev/null | tr ",|" "\n\n"
} | sed -n "s#^[a-z+]*://\([^/:@]*@\)\{0,1\}\([A-Za-z0-9.-]*\).*#\2#p" | sort -u | paste -sd, -
'

label_package_hosts() {
	local name=$1 ref=$2 hosts dir
	hosts=$("$ENGINE" run --rm --network none --entrypoint /bin/sh "$ref" -c "$PACKAGE_HOSTS_PROBE") ||
		dm_die "$name: cannot read the package managers' hosts from $ref"
	[[ $hosts =~ ^[A-Za-z0-9.,-]*$ ]] || dm_die "$name: odd package hosts from $ref: $hosts"
	dir="$WORK/label-$name"
	mkdir -p "$dir"
	printf 'FROM %s\nLABEL demesne.package-hosts="%s"\n' "$ref" "$hosts" >"$dir/Containerfile"
	local -a args=(build --file "$dir/Containerfile" --tag "$ref")
	[[ $ENGINE != podman ]] || args+=(--pull=never --layers=false)
	step "$name" "label package hosts ($hosts)" "$ENGINE" "${args[@]}" "$dir"
}

# What --list reads of each image, one engine call per image instead of one
# per field (the CLI starts in ~0.1 s; doctor ran 48 of them): ref -> id,
# inputs label, parent label and size, separated by '|'; "-" when missing. Only
# --list fills it: it builds nothing, so nothing it read goes stale.
declare -A IMAGE_CACHE=()
IMAGE_FIELDS='{{.Id}}|{{ index .Config.Labels "demesne.inputs" }}|{{ index .Config.Labels "demesne.parent" }}|{{.Size}}'
# One engine call for all of them (each call of the engine's CLI costs a few
# hundred ms of CPU): every image found prints its fields and its tags; a
# reference none of the tags names (the engine spelled it otherwise) is
# asked for alone, as is every one when the batch printed nothing.
cache_images() {
	local ref line tags tag
	local -A found=()
	while IFS= read -r line; do
		tags=${line##*|}
		for tag in $tags; do found[$tag]=${line%|*}; done
	done < <("$ENGINE" image inspect --format "$IMAGE_FIELDS|{{range .RepoTags}}{{.}} {{end}}" "$@" 2>/dev/null || true)
	for ref in "$@"; do
		if [[ -n ${found[$ref]:-} ]]; then
			IMAGE_CACHE[$ref]=${found[$ref]}
		else
			IMAGE_CACHE[$ref]=$("$ENGINE" image inspect --format "$IMAGE_FIELDS" "$ref" 2>/dev/null) || IMAGE_CACHE[$ref]=-
		fi
	done
}

# Print one field of an image (Go template), or nothing if it does not exist.
image_field() {
	local f=() i
	if [[ -n ${IMAGE_CACHE[$1]:-} ]]; then
		[[ ${IMAGE_CACHE[$1]} != - ]] || return 0
		IFS='|' read -r -a f <<<"${IMAGE_CACHE[$1]}"
		case $2 in
		'{{.Id}}') i=0 ;;
		'{{ index .Config.Labels "demesne.inputs" }}') i=1 ;;
		'{{ index .Config.Labels "demesne.parent" }}') i=2 ;;
		'{{.Size}}') i=3 ;;
		*) i='' ;;
		esac
		if [[ -n $i ]]; then
			printf '%s\n' "${f[i]:-}"
			return 0
		fi
	fi
	"$ENGINE" image inspect --format "$2" "$1" 2>/dev/null || true
}

# An image's id as bare hex: docker says "sha256:<hex>", podman "<hex>", and
# a label written by one engine must still match when the other reads it.
image_id() {
	local id
	id=$(image_field "$1" '{{.Id}}')
	printf '%s\n' "${id#sha256:}"
}

image_label() {
	image_field "$1" "{{ index .Config.Labels \"$2\" }}"
}

# Succeed when $1's tagged image is current; otherwise say why on stdout.
image_is_current() {
	local name=$1 hash=$2 ref have parent parent_id
	ref=$(dm_image_ref "$name")
	if [[ -z $(image_id "$ref") ]]; then
		echo "not built yet; inputs ${hash:0:12}"
		return 1
	fi
	have=$(image_label "$ref" demesne.inputs)
	if [[ $have != "$hash" ]]; then
		echo "inputs changed (${have:0:12} -> ${hash:0:12})"
		return 1
	fi
	parent=$("${name}_parent")
	if [[ -n $parent ]]; then
		parent_id=$(image_id "$(dm_image_ref "$parent")")
		have=$(image_label "$ref" demesne.parent)
		if [[ ${have#sha256:} != "$parent_id" ]]; then
			echo "$parent was rebuilt; inputs ${hash:0:12}"
			return 1
		fi
	fi
	return 0
}

# Besides :latest, every image is tagged with the first 12 hex digits of its
# inputs hash, so `images list` (and a person) can tell which inputs a
# built image came from. Idempotent.
tag_inputs() {
	local name=$1 hash=$2
	"$ENGINE" tag "$(dm_image_ref "$name")" "$DM_IMAGE_REPO/$name:${hash:0:12}" >/dev/null 2>&1 ||
		dm_log "$name: warning: could not tag $DM_IMAGE_REPO/$name:${hash:0:12}"
}

# --list: one tab-separated line per image on stdout: name, reference, the
# inputs tag it should have, state (built, stale: <why>, missing) and size in
# bytes (0 when missing). Nothing is built.
list_images() {
	local name hash ref why state size refs=()
	for name in "${ALL_IMAGES[@]}"; do refs+=("$(dm_image_ref "$name")"); done
	cache_images "${refs[@]}"
	for name in "${ALL_IMAGES[@]}"; do
		hash_inputs "$name"
		hash=${INPUTS_HASH[$name]}
		ref=$(dm_image_ref "$name")
		size=0
		if why=$(image_is_current "$name" "$hash"); then
			state=built
		elif [[ -z $(image_id "$ref") ]]; then
			state=missing
		else
			state="stale: $why"
		fi
		[[ $state == missing ]] || size=$(image_field "$ref" '{{.Size}}')
		printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$ref" "${hash:0:12}" "$state" "${size:-0}"
	done
}

human_size() {
	numfmt --to=iec-i --suffix=B --format='%.1f' "$1" 2>/dev/null || printf '%s bytes\n' "$1"
}

# Build (or skip) one image. $1 name, $2 1 to force.
ensure_image() {
	local name=$1 force=$2 hash ref why old_id old_tag new_id parent parent_id='' start secs
	hash_inputs "$name"
	hash=${INPUTS_HASH[$name]}
	ref=$(dm_image_ref "$name")
	if why=$(image_is_current "$name" "$hash"); then
		if ((!force)); then
			tag_inputs "$name" "$hash"
			dm_log "$name: up to date (inputs ${hash:0:12})"
			return 0
		fi
		why="--force; inputs ${hash:0:12}"
	fi
	parent=$("${name}_parent")
	if [[ -n $parent ]]; then
		parent_id=$(image_id "$(dm_image_ref "$parent")")
		[[ -n $parent_id ]] || dm_die "$name: parent image $(dm_image_ref "$parent") is missing"
	fi
	old_id=$(image_id "$ref")
	old_tag=$(image_label "$ref" demesne.inputs)
	dm_log "$name: building $ref ($why)"
	start=$(date +%s)
	"${name}_build" "$ref" "$hash" "$parent_id"
	label_package_hosts "$name" "$ref"
	secs=$(($(date +%s) - start))
	new_id=$(image_id "$ref")
	[[ -n $new_id ]] || dm_die "$name: build finished but $ref does not exist"
	[[ $(image_label "$ref" demesne.inputs) == "$hash" ]] ||
		dm_die "$name: $ref lacks label demesne.inputs=$hash"
	tag_inputs "$name" "$hash"
	# The replaced image is now untagged (its inputs tag goes first); drop it
	# unless a container still uses it, in which case the engine refuses and
	# it stays for its owner.
	if [[ -n $old_tag && ${old_tag:0:12} != "${hash:0:12}" ]]; then
		"$ENGINE" untag "$DM_IMAGE_REPO/$name:${old_tag:0:12}" >/dev/null 2>&1 ||
			"$ENGINE" rmi --no-prune "$DM_IMAGE_REPO/$name:${old_tag:0:12}" >/dev/null 2>&1 || true
	fi
	if [[ -n $old_id && $old_id != "$new_id" ]]; then
		if "$ENGINE" image rm "$old_id" >/dev/null 2>&1; then
			dm_log "$name: removed the previous image $old_id"
		else
			dm_log "$name: kept the previous image $old_id (still in use)"
		fi
	fi
	dm_log "$name: built $ref in ${secs}s ($(human_size "$(image_field "$ref" '{{.Size}}')"))"
}

# Serialise concurrent runs (the server may call us while a person does):
# the second waits, then finds the image up to date. The lock is on the
# images folder itself so no lock file has to be created anywhere.
take_lock() {
	command -v flock >/dev/null 2>&1 || return 0
	exec 9<"$IMAGES_DIR"
	if ! flock -n 9; then
		dm_log "waiting for another build.sh run to finish"
		flock 9
	fi
}

cleanup() {
	[[ -z $WORK ]] || rm -rf -- "$WORK"
}

is_known() {
	local n
	for n in "${ALL_IMAGES[@]}"; do [[ $n == "$1" ]] && return 0; done
	return 1
}

main() {
	local engine_arg='' force=0 all=0 list=0 name p
	local -a names=()
	while (($#)); do
		case $1 in
		--help | -h)
			usage
			return 0
			;;
		--engine)
			(($# >= 2)) || usage_error "--engine needs a value"
			engine_arg=$2
			shift
			;;
		--engine=*) engine_arg=${1#--engine=} ;;
		--force) force=1 ;;
		--all) all=1 ;;
		--list) list=1 ;;
		-*) usage_error "unknown option '$1'" ;;
		*)
			is_known "$1" || usage_error "unknown image '$1' (known: ${ALL_IMAGES[*]})"
			names+=("$1")
			;;
		esac
		shift
	done
	if ((list)); then
		ENGINE=$(dm_pick_engine "$engine_arg")
		list_images
		return 0
	fi
	((all)) && names=("${ALL_IMAGES[@]}")
	((${#names[@]})) || usage_error "no image named (known: ${ALL_IMAGES[*]}, or --all)"

	ENGINE=$(dm_pick_engine "$engine_arg")
	"$ENGINE" image ls >/dev/null 2>&1 || dm_die "'$ENGINE image ls' failed: is the engine usable?"

	# Requested images plus their ancestors; --force applies to the named ones.
	local -A wanted=() forced=()
	for name in "${names[@]}"; do
		forced[$name]=$force
		p=$name
		while [[ -n $p ]]; do
			wanted[$p]=1
			p=$("${p}_parent")
		done
	done

	WORK=$(mktemp -d "${TMPDIR:-/tmp}/demesne-images.XXXXXX")
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	take_lock

	dm_log "engine $ENGINE, images dir $IMAGES_DIR"
	for name in "${ALL_IMAGES[@]}"; do
		[[ -n ${wanted[$name]:-} ]] || continue
		ensure_image "$name" "${forced[$name]:-0}"
	done
}

main "$@"
