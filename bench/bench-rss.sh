#!/usr/bin/env bash
# Memory soak: the resident size of ONE `demesne serve` process (stdio, modern
# era) idle and over CALLS tool calls (default 1000) through the same session,
# beside the resident size of the container engine process that serves it
# (`podman system service`: a private one the server started, or the one
# listening on the socket it uses) as the named baseline, sampled at the
# same moments. Both from /proc/PID/status (VmRSS) and /proc/PID/smaps_rollup
# (Rss, Pss).
#
#   DEMESNE=/abs/path/to/demesne bench/bench-rss.sh
#
# Samples (MiB; Anon is RssAnon, the rest of Rss the binary's and its
# shared libraries' file pages): idle (after initialize, once the warm pool is full and the size
# has settled), then every EVERY calls (default 100); each sample waits for
# the size to settle (no change for SETTLE_MS, at most SETTLE_MAX s), so
# what the server does in the background after a call (the reaper, the pool
# refilling) is over. The calls, in one session: a sandbox_create first
# (not counted), then per ten calls one `sandbox_script {"command": "echo hi",
# "egress": "none"}` (python image), one `sandbox_list` every twenty (the
# 11th, 31st, ...), and
# the rest `sandbox_exec {"command": "true"}` into that one sandbox (the hot
# path); then sandbox_destroy. Every result is checked; a failed call is
# counted and the bench exits 1 at the end if there was any, or if the
# server left a container behind (label demesne.owner of its process, or
# demesne.sandbox of its sandbox; such containers are removed).
# Targets: idle Rss at most 10 MiB; after CALLS calls within 2 MiB of the
# value after the first EVERY. The ratio printed is demesne / engine.
#
# Environment: DEMESNE (required, absolute path), CALLS (default 1000),
# EVERY (sample interval in calls, default 100), SCRIPT_EVERY (one
# sandbox_script per this many calls, default 10, 0 = none), LIST_EVERY (one
# sandbox_list per this many calls, default 20, 0 = none), ERA
# (modern|legacy, default modern), SETTLE_MS (default 2000), SETTLE_MAX
# (seconds, default 20), ENGINE_PID (the engine process to sample; default:
# found as above), PODMAN (default podman), DEMESNE_POOL as the server
# should have it, DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at
# exit). Needs node and tests/e2e/node_modules (npm ci --prefix tests/e2e).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CALLS=${CALLS:-1000}
EVERY=${EVERY:-100}
SCRIPT_EVERY=${SCRIPT_EVERY:-10}
LIST_EVERY=${LIST_EVERY:-20}
ERA=${ERA:-modern}
SETTLE_MS=${SETTLE_MS:-2000}
SETTLE_MAX=${SETTLE_MAX:-20}
PODMAN=${PODMAN:-podman}
IDLE_MAX_KIB=$((10 * 1024))
GROWTH_MAX_KIB=$((2 * 1024))

die() { echo "bench-rss: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
[[ -d $here/../tests/e2e/node_modules/@modelcontextprotocol/client ]] || die "tests/e2e/node_modules is missing: run npm ci --prefix tests/e2e"
command -v "$PODMAN" >/dev/null || die "$PODMAN not found"
for v in CALLS EVERY SETTLE_MS SETTLE_MAX; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"; done
for v in SCRIPT_EVERY LIST_EVERY; do [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number (0 = none)"; done
[[ -z ${ENGINE_PID:-} || $ENGINE_PID =~ ^[1-9][0-9]*$ ]] || die "ENGINE_PID must be a pid"

own_root=
if [[ -z ${DEMESNE_OUTPUT_ROOT:-} ]]; then
  own_root=$(mktemp -d /tmp/demesne-bench-XXXXXX)
  export DEMESNE_OUTPUT_ROOT=$own_root
fi
work=$(mktemp -d /tmp/demesne-bench-rss-XXXXXX)

timer_pid=
cleanup() {
  if [[ -n $timer_pid ]] && kill -0 "$timer_pid" 2>/dev/null; then
    { echo quit >&"${TIMER[1]}"; } 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$timer_pid" 2>/dev/null || break; sleep 0.5; done
    kill "$timer_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  [[ -n $own_root ]] && rm -rf "$own_root"
  return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# One MCP session for the whole run (bench/mcp-timer.mjs --stdin); with
# --keep-going a failed call answers "fail <message>" and the session goes on.
coproc TIMER { exec node "$here/mcp-timer.mjs" --stdin --era "$ERA" --tool list --keep-going; }
# shellcheck disable=SC2153 # coproc sets TIMER_PID
timer_pid=$TIMER_PID

ask() { # line -> sets $reply; dies on EOF, timeout or a protocol error
  local line
  echo "$1" >&"${TIMER[1]}"
  IFS= read -r -t 600 line <&"${TIMER[0]}" || die "mcp-timer.mjs gave no answer to '$1'"
  [[ $line != error\ * ]] || die "mcp-timer.mjs: ${line#error }"
  reply=$line
}

IFS= read -r -t 600 reply <&"${TIMER[0]}" || die "mcp-timer.mjs gave no answer"
case $reply in ready\ *) echo "session: ${reply#ready }" ;; *) die "unexpected from mcp-timer.mjs: $reply" ;; esac
ask pid
server=${reply#pid }
[[ $server =~ ^[1-9][0-9]*$ && -r /proc/$server/smaps_rollup ]] || die "cannot read the server's /proc entry (pid '$server')"

# The server's owner label (src/context.c: the boot id's first 8 characters,
# the pid, the process's start time in clock ticks, field 22 of its stat).
stat=$(<"/proc/$server/stat")
read -r -a fields <<<"${stat##*) }"
boot=$(</proc/sys/kernel/random/boot_id)
owner_label="demesne.owner=${boot:0:8}-$server-${fields[19]}"

# The engine process that serves it: a private `podman system service` the
# server started (its child), or the process listening on the socket it uses.
comm_of() { local c; { c=$(<"/proc/$1/comm"); } 2>/dev/null || return 1; echo "$c"; }
find_engine() {
  local d s rest host sock pid
  for d in /proc/[0-9]*; do
    { s=$(<"$d/stat"); } 2>/dev/null || continue
    rest=${s##*) }
    read -r -a f <<<"$rest"
    [[ ${f[1]} == "$server" && $(comm_of "${d#/proc/}") == podman ]] && { echo "${d#/proc/}"; return 0; }
  done
  host=${DEMESNE_ENGINE_HOST:-${DOCKER_HOST:-${CONTAINER_HOST:-}}}
  if [[ -n $host ]]; then
    [[ $host == unix://* ]] || return 1
    sock=${host#unix://}
  elif [[ -S /run/podman/podman.sock ]]; then
    sock=/run/podman/podman.sock
  elif [[ -n ${XDG_RUNTIME_DIR:-} && -S $XDG_RUNTIME_DIR/podman/podman.sock ]]; then
    sock=$XDG_RUNTIME_DIR/podman/podman.sock
  else
    sock=/var/run/docker.sock
  fi
  command -v ss >/dev/null || return 1
  # users:(("podman",pid=123,fd=3)): a socket-activated one is held by systemd too.
  for pid in $(ss -xlpn | awk -v s="$sock" '$5 == s' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    case $(comm_of "$pid") in podman | dockerd) echo "$pid"; return 0 ;; esac
  done
  return 1
}
engine=${ENGINE_PID:-}
[[ -n $engine ]] || engine=$(find_engine) || die "cannot find the engine process the server talks to: set ENGINE_PID"
echo "demesne serve: pid $server ($owner_label)"
echo "engine:        pid $engine ($(comm_of "$engine") $(tr '\0' ' ' <"/proc/$engine/cmdline" | sed 's/ $//'))"

# pid -> "vmrss rss pss anon" in KiB (anon: RssAnon, the heap, stacks and
# the libraries' written pages; the rest of Rss is file pages: the binary and
# its shared libraries)
mem_of() {
  local vm anon rss pss
  read -r vm anon < <(awk '$1 == "VmRSS:" { v = $2 } $1 == "RssAnon:" { a = $2 } END { print v, a }' "/proc/$1/status") || return 1
  read -r rss pss < <(awk '$1 == "Rss:" { r = $2 } $1 == "Pss:" { p = $2 } END { print r, p }' "/proc/$1/smaps_rollup") || return 1
  [[ -n $vm && -n $rss ]] || return 1
  echo "$vm $rss $pss $anon"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# Waits until the server's and the engine's VmRSS have not changed for
# SETTLE_MS (polling every 250 ms), at most SETTLE_MAX seconds; then one sample.
settle() {
  local last="" cur since t0 t
  t0=$(now_ms); since=$t0
  while :; do
    cur="$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$server/status") $(awk '$1 == "VmRSS:" { print $2 }' "/proc/$engine/status")"
    t=$(now_ms)
    if [[ $cur != "$last" ]]; then last=$cur; since=$t; fi
    if ((t - since >= SETTLE_MS)); then return 0; fi
    if ((t - t0 >= SETTLE_MAX * 1000)); then echo "  (size still changing after ${SETTLE_MAX} s)" >&2; return 0; fi
    sleep 0.25
  done
}
mib() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
fmt='%-11s %7s %7s %7s %7s   %7s %7s %7s %7s   %6s %6s\n'
# shellcheck disable=SC2059 # the format is $fmt
printf "$fmt" "MiB" "demesne" "" "" "" "engine" "" "" "" "ratio" "ratio"
# shellcheck disable=SC2059
printf "$fmt" "sample" "VmRSS" "Rss" "Pss" "Anon" "VmRSS" "Rss" "Pss" "Anon" "Rss" "Pss"
sample() { # key label -> a row; appends "key d_vm d_rss d_pss d_anon e_vm e_rss e_pss e_anon" (KiB) to $work/samples
  local d e dv dr dp da ev er ep ea
  settle
  d=$(mem_of "$server") || die "the server (pid $server) is gone"
  e=$(mem_of "$engine") || die "the engine process (pid $engine) is gone"
  echo "$1 $d $e" >>"$work/samples"
  read -r dv dr dp da ev er ep ea <<<"$d $e"
  # shellcheck disable=SC2059
  printf "$fmt" "$2" "$(mib "$dv")" "$(mib "$dr")" "$(mib "$dp")" "$(mib "$da")" \
    "$(mib "$ev")" "$(mib "$er")" "$(mib "$ep")" "$(mib "$ea")" \
    "$(awk -v a="$dr" -v b="$er" 'BEGIN { printf "%.3f", a / b }')" "$(awk -v a="$dp" -v b="$ep" 'BEGIN { printf "%.3f", a / b }')"
}

: >"$work/samples"
sample idle idle

ask create
[[ $reply == created\ * ]] || die "sandbox_create: ${reply#fail }"
read -r _ sandbox_id _ <<<"$reply"
sandbox_label="demesne.sandbox=$sandbox_id"

failed=0
: >"$work/exec"; : >"$work/script"; : >"$work/list"
t_start=$(now_ms)
for ((i = 1; i <= CALLS; i++)); do
  tool="exec"
  if ((SCRIPT_EVERY > 0 && i % SCRIPT_EVERY == 0)); then tool=script
  elif ((LIST_EVERY > 0 && i % LIST_EVERY == (LIST_EVERY / 2 + 1) % LIST_EVERY)); then tool=list; fi
  ask "call $tool"
  case $reply in
    ms\ *) echo "${reply#ms }" >>"$work/$tool" ;;
    fail\ *) failed=$((failed + 1)); ((failed > 5)) || echo "call $i ($tool) failed: ${reply#fail }" >&2 ;;
    *) die "unexpected from mcp-timer.mjs: $reply" ;;
  esac
  if ((i % EVERY == 0 || i == CALLS)); then sample "$i" "after $i"; fi
done
t_calls=$(($(now_ms) - t_start))

ask destroy
[[ $reply == ms\ * ]] || { failed=$((failed + 1)); echo "sandbox_destroy failed: ${reply#fail }" >&2; }
sample destroyed destroyed

# End the session; the server removes its warm containers as it exits.
echo quit >&"${TIMER[1]}"
for _ in $(seq 60); do kill -0 "$timer_pid" 2>/dev/null || break; sleep 0.5; done
! kill -0 "$timer_pid" 2>/dev/null || die "mcp-timer.mjs did not exit"
wait "$timer_pid" || die "mcp-timer.mjs exited with an error"
timer_pid=

leftover=
for _ in $(seq 20); do
  leftover=$("$PODMAN" ps -aq --filter "label=$owner_label"; "$PODMAN" ps -aq --filter "label=$sandbox_label")
  [[ -z $leftover ]] && break
  sleep 0.5
done
if [[ -n $leftover ]]; then
  echo "containers left behind (removed now):" >&2
  "$PODMAN" ps -a --filter "label=$owner_label" >&2 || true
  "$PODMAN" ps -a --filter "label=$sandbox_label" >&2 || true
  # shellcheck disable=SC2086 # one id a word
  "$PODMAN" rm -f -t 0 $leftover >/dev/null 2>&1 || true
fi

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row() { awk -v k="$1" '$1 == k { print; exit }' "$work/samples"; }
first=$EVERY; ((first <= CALLS)) || first=$CALLS
read -r _ _ idle_rss _ _ _ e_idle_rss _ _ <<<"$(row idle)"
read -r _ _ a_rss _ _ _ e_a_rss _ _ <<<"$(row "$first")"
read -r _ _ b_rss _ _ _ e_b_rss _ _ <<<"$(row "$CALLS")"

echo
printf 'calls: %d in %.1f s: sandbox_exec %d (median %s ms), sandbox_script %d (median %s ms), sandbox_list %d (median %s ms); failed %d\n' \
  "$CALLS" "$(awk -v t="$t_calls" 'BEGIN { print t / 1000 }')" \
  "$(wc -l <"$work/exec")" "$(median "$work/exec")" "$(wc -l <"$work/script")" "$(median "$work/script")" \
  "$(wc -l <"$work/list")" "$(median "$work/list")" "$failed"
printf 'demesne Rss idle %s MiB, after %d calls %s MiB, after %d %s MiB: growth %s MiB\n' "$(mib "$idle_rss")" \
  "$first" "$(mib "$a_rss")" "$CALLS" "$(mib "$b_rss")" "$(mib $((b_rss - a_rss)))"
printf 'engine  Rss idle %s MiB, after %d calls %s MiB, after %d %s MiB: growth %s MiB\n' "$(mib "$e_idle_rss")" \
  "$first" "$(mib "$e_a_rss")" "$CALLS" "$(mib "$e_b_rss")" "$(mib $((e_b_rss - e_a_rss)))"
printf 'ratio demesne/engine Rss: idle %.3f, after %d %.3f, after %d %.3f\n' \
  "$(awk -v a="$idle_rss" -v b="$e_idle_rss" 'BEGIN { print a / b }')" "$first" \
  "$(awk -v a="$a_rss" -v b="$e_a_rss" 'BEGIN { print a / b }')" "$CALLS" \
  "$(awk -v a="$b_rss" -v b="$e_b_rss" 'BEGIN { print a / b }')"
verdict() { if (($1)); then echo met; else echo "NOT met"; fi; }
echo "target idle Rss <= 10 MiB: $(verdict $((idle_rss <= IDLE_MAX_KIB)))"
growth=$((b_rss - a_rss)); growth=${growth#-}
echo "target |after $CALLS - after $first| <= 2 MiB: $(verdict $((growth <= GROWTH_MAX_KIB)))"

[[ -z $leftover ]] || die "the server left $(wc -w <<<"$leftover") container(s) behind"
((failed == 0)) || die "$failed call(s) failed"
