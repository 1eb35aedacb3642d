# SPDX-License-Identifier: MIT
# Sourced by the shell tests: what a test's output root left in the engine.
#
#   containers_left ROOT   the ids of the containers (running or not) with the
#                          label of a server of output root ROOT, after waiting
#                          up to 10 s for removals in flight; a sentence in
#                          parentheses when neither the engine's socket
#                          (DOCKER_HOST, DEMESNE_ENGINE_HOST, root's Podman
#                          socket) nor the podman CLI answered.
#   containers_now ROOT [runs]
#                          the same at once, without waiting: for a test
#                          waiting for a container to appear.
#   containers_left ROOT runs
#                          the same, leaving out the warm pool's containers
#                          (label demesne.pool): for a check while the
#                          server runs, when no run claims from the pool.
#
# The label is demesne.root=<FNV-1a, 64 bit, of ROOT as given> (src/core/context.c).

root_label() {
	local s=$1 h=1469598103934665603 i c
	for ((i = 0; i < ${#s}; i++)); do
		printf -v c '%d' "'${s:i:1}"
		h=$(((h ^ c) * 1099511628211))
	done
	printf 'demesne.root=%016x' "$h"
}

containers_now() {
	local label engine list pick='.[].Id'
	[ "${2:-}" = runs ] && pick='.[] | select(.Labels["demesne.pool"] == null) | .Id'
	label=$(root_label "$1")
	engine=${DOCKER_HOST:-${DEMESNE_ENGINE_HOST:-unix:///run/podman/podman.sock}}
	if list=$(curl -sf --unix-socket "${engine#unix://}" -G http://d/v1.41/containers/json \
		--data-urlencode all=1 --data-urlencode "filters={\"label\":[\"$label\"]}"); then
		jq -r "$pick" <<<"$list"
	elif list=$(podman ps -a --filter "label=$label" --format json 2>/dev/null); then
		jq -r "$pick" <<<"$list"
	else
		printf '%s' "(neither the engine at $engine nor the podman CLI answered)"
	fi
}

containers_left() {
	local left
	for _ in $(seq 50); do
		left=$(containers_now "$@")
		[ -z "$left" ] && break
		sleep 0.2
	done
	printf '%s' "$left"
}
