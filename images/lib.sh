# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Helpers shared by build.sh and the smoke tests. Sourced, never run: it only
# defines functions, so sourcing it has no side effects.
#
# Every line meant for a person goes to stderr with the "images: " prefix, so a
# caller (the demesne server, CI) can capture stdout separately and still tell
# which tool a log line came from.

# The fully qualified tag of an image: "localhost/" keeps both podman and
# docker from ever asking a registry (none is reachable here).
# DEMESNE_IMAGE_REPO moves every image elsewhere (the server reads it too).
readonly DM_IMAGE_REPO=${DEMESNE_IMAGE_REPO:-localhost/demesne}

dm_log() {
	printf 'images: %s\n' "$*" >&2
}

dm_die() {
	dm_log "error: $*"
	exit 1
}

dm_image_ref() {
	printf '%s/%s:latest\n' "$DM_IMAGE_REPO" "$1"
}

# Pick the engine: explicit choice, then $DEMESNE_ENGINE, then podman if it is
# on PATH, then docker. Prints the name; dies if it is unusable.
dm_pick_engine() {
	local want=${1:-${DEMESNE_ENGINE:-}}
	if [[ -z $want ]]; then
		if command -v podman >/dev/null 2>&1; then
			want=podman
		else
			want=docker
		fi
	fi
	case $want in
	podman | docker) ;;
	*) dm_die "unknown engine '$want' (expected podman or docker)" ;;
	esac
	command -v "$want" >/dev/null 2>&1 || dm_die "engine '$want' is not on PATH"
	printf '%s\n' "$want"
}

# Run "$@" with its stdout and stderr sent to our stderr, each line prefixed,
# so tool chatter never lands on our stdout. Returns the command's status
# (pipefail is on in every script that sources this file).
dm_run_logged() {
	local prefix=$1
	shift
	"$@" 2>&1 | sed -u "s|^|images: $prefix: |" >&2
}

# Common start of every smoke test: parse "[--engine E]", pick the engine and
# make sure image $1 exists. Sets ENGINE and REF for the caller.
dm_smoke_init() {
	local name=$1 engine_arg=''
	shift
	while (($#)); do
		case $1 in
		--engine) engine_arg=${2:-}; shift ;;
		--engine=*) engine_arg=${1#--engine=} ;;
		--help | -h)
			printf 'usage: %s/smoke.sh [--engine podman|docker]\n' "$name"
			printf 'Runs checks inside %s with --network none; exit 0 = pass.\n' "$(dm_image_ref "$name")"
			exit 0
			;;
		*) dm_die "$name smoke: unknown argument '$1'" ;;
		esac
		shift
	done
	ENGINE=$(dm_pick_engine "$engine_arg")
	REF=$(dm_image_ref "$name")
	"$ENGINE" image inspect "$REF" >/dev/null 2>&1 ||
		dm_die "$name smoke: $REF does not exist (build it: images/build.sh $name)"
}

# Run a command in a throw-away container locked down the way the demesne
# server runs sandboxes: no network, no capabilities, no privilege gain.
# Extra engine options go before "--".
dm_smoke_run() {
	local -a opts=()
	while (($#)) && [[ $1 != -- ]]; do
		opts+=("$1")
		shift
	done
	shift
	"$ENGINE" run --rm --network none --cap-drop ALL \
		--security-opt no-new-privileges "${opts[@]}" "$REF" "$@"
}
