#!/bin/sh
# SPDX-License-Identifier: MIT
# A test host for the suites that run as a normal user (who cannot make a
# network namespace): run as root before them, and after them.
#
#   testhost.sh start DIR   netns dm-testhostN, veth dmthNh (198.18.213.4N+1/30
#                           on the host) to 198.18.213.4N+2/30 inside, and
#                           there the servers tests/e2e/client-egress.mjs makes
#                           for itself: HTTP on 80, 8080, 8081 ("hello from
#                           PORT") and 8082 ("you are ADDR"), UDP 53 counting
#                           what it gets into DIR/udp-count (world-readable;
#                           absent until a datagram arrives). Writes DIR/env:
#                             DEMESNE_TEST_HOST=198.18.213.4N+2
#                             DEMESNE_TEST_HOST_GATEWAY=198.18.213.4N+1
#                             DEMESNE_TEST_HOST_UDP_LOG=DIR/udp-count
#   testhost.sh stop DIR    kills the servers (by the PID in DIR/pid) and
#                           removes the namespace and the veth.
#
# N is the first free slot (0 to 15): two runs side by side (the rootless
# suite's test host, and test-egress-rootless as root in the dockerd run)
# each get their own namespace, veth and /30. A slot is taken by making its
# namespace (ip netns add fails if it exists: no two runs take one), and
# kept in DIR/slot for stop.
#
# Needs ip(8) and node (NODE, else node on PATH).
set -eu

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$2

names() { # slot: the namespace, veth ends and addresses of that slot
	NS=dm-testhost$1
	HOSTSIDE=dmth$1h
	PEER=dmth$1p
	HOST_IP=198.18.213.$(($1 * 4 + 1))
	TEST_IP=198.18.213.$(($1 * 4 + 2))
}

stop() {
        [ -f "$dir/slot" ] || return 0
        names "$(cat "$dir/slot")"
        if [ -f "$dir/pid" ]; then
                pid=$(cat "$dir/pid")
                # The servers' process group (setsid below); only ours.
                kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
                rm -f "$dir/pid"
        fi
        ip link del "$HOSTSIDE" 2>/dev/null || true
        ip netns del "$NS" 2>/dev/null || true
        rm -f "$dir/env" "$dir/udp-count" "$dir/servers.log" "$dir/slot"
}

case $1 in
start)
        [ "$(id -u)" -eq 0 ] || { echo "$0: needs root (it makes a network namespace)" >&2; exit 1; }
        node=${NODE:-$(command -v node)} || { echo "$0: node not found (set NODE)" >&2; exit 1; }
        mkdir -p "$dir"
        chmod 755 "$dir"
        dir=$(cd "$dir" && pwd)
        [ ! -f "$dir/slot" ] || { echo "$0: $dir holds a test host: run '$0 stop $dir' first" >&2; exit 1; }
        slot=0
        while :; do
                names $slot
                ip netns add "$NS" 2>/dev/null && break
                slot=$((slot + 1))
                [ $slot -lt 16 ] || { echo "$0: no free slot: namespaces dm-testhost0 to 15 exist" >&2; exit 1; }
        done
        echo $slot >"$dir/slot"
        trap 'stop' EXIT
        ip link add "$HOSTSIDE" type veth peer name "$PEER" netns "$NS"
        ip addr add "$HOST_IP/30" dev "$HOSTSIDE"
        ip link set "$HOSTSIDE" up
        ip -n "$NS" addr add "$TEST_IP/30" dev "$PEER"
        ip -n "$NS" link set "$PEER" up
        ip -n "$NS" link set lo up
        # Replies to rootful sandboxes' pool go back through the host.
        ip -n "$NS" route add 10.213.0.0/16 via "$HOST_IP"
        rm -f "$dir/udp-count"
        umask 022
        setsid ip netns exec "$NS" "$node" -e "
          const http = require('http'), dgram = require('dgram'), fs = require('fs');
          let up = 0; const ready = () => { if (++up === 5) fs.writeFileSync('$dir/ready', '1'); };
          for (const port of [80, 8080, 8081]) http.createServer((q, r) => r.end('hello from ' + port + '\\n')).listen(port, '$TEST_IP', ready);
          http.createServer((q, r) => r.end('you are ' + q.socket.remoteAddress + '\\n')).listen(8082, '$TEST_IP', ready);
          const u = dgram.createSocket('udp4'); let n = 0;
          u.on('message', () => fs.writeFileSync('$dir/udp-count', String(++n), { mode: 0o644 }));
          u.bind(53, '$TEST_IP', ready);" </dev/null >"$dir/servers.log" 2>&1 &
        echo $! >"$dir/pid"
        rm -f "$dir/ready"
        i=0
        while [ ! -f "$dir/ready" ]; do
                i=$((i + 1))
                if [ $i -gt 100 ]; then
                        echo "$0: the servers did not start:" >&2
                        cat "$dir/servers.log" >&2
                        exit 1
                fi
                sleep 0.1
        done
        rm -f "$dir/ready"
        printf 'DEMESNE_TEST_HOST=%s\nDEMESNE_TEST_HOST_GATEWAY=%s\nDEMESNE_TEST_HOST_UDP_LOG=%s\n' \
                "$TEST_IP" "$HOST_IP" "$dir/udp-count" >"$dir/env"
        chmod 644 "$dir/env"
        trap - EXIT
        ;;
stop)
        stop
        ;;
*)
        usage
        ;;
esac
