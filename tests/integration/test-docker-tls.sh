#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# An engine over tcp:// with TLS, Docker's conventions (DOCKER_TLS_VERIFY,
# DOCKER_CERT_PATH with ca.pem, cert.pem, key.pem; default ~/.docker), and
# the ways it must fail. Run by tests/run-dockerd.sh against its private
# dockerd, which also listens on tcp://127.0.0.1:$DEMESNE_TLS_PORT with
# --tlsverify and the PKI tests/make-test-certs.sh made in $DEMESNE_TLS_CERTS.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bin=${DEMESNE:?DEMESNE must name the binary}
port=${DEMESNE_TLS_PORT:?DEMESNE_TLS_PORT: the TLS port of a dockerd started by tests/run-dockerd.sh}
certs=${DEMESNE_TLS_CERTS:?DEMESNE_TLS_CERTS: the directory tests/make-test-certs.sh filled}
tmp=$(mktemp -d /tmp/dm-tls-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state DEMESNE_START_PODMAN=0
unset DEMESNE_ALLOWED_PATHS DEMESNE_ENGINE_HOST CONTAINER_HOST DOCKER_TLS_VERIFY DOCKER_CERT_PATH
image=()
[ -z "${DEMESNE_TEST_IMAGE:-}" ] || image=(--image "$DEMESNE_TEST_IMAGE")
url=tcp://127.0.0.1:$port
ms() { date +%s%3N; }

# ---- works --------------------------------------------------------------------
out=$(DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/client timeout 60 "$bin" doctor 2>&1)
grep -q "container engine: .* at $url (TLS, engine verified" <<<"$out"
ok $? "doctor names the engine URL and that TLS is on"
echo "$out" | grep 'container engine' | sed 's/^/# /'

out=$(DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/client timeout 120 \
	"$bin" run "${image[@]}" --quiet -- bash -c 'echo hi-over-tls; echo err >&2; exit 3' 2>"$tmp/err" </dev/null)
rc=$?
[ "$rc" = 3 ] && [ "$out" = hi-over-tls ] && grep -q '^err$' "$tmp/err"
ok $? "a sandbox run through TLS: stdout, stderr and exit code come back (rc $rc, out '$out')"
[ $rc = 3 ] || sed 's/^/#   /' "$tmp/err" | tail -5

# Docker's default: DOCKER_CERT_PATH unset means ~/.docker.
mkdir -p "$tmp/home/.docker" && cp "$certs"/client/*.pem "$tmp/home/.docker/"
out=$(HOME=$tmp/home DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 timeout 60 "$bin" doctor 2>&1)
grep -q "container engine: .* at $url (TLS" <<<"$out"
ok $? "DOCKER_CERT_PATH unset: the certificates come from ~/.docker"

# ---- refused ------------------------------------------------------------------
fails() { # name expected-regex env...
	local name=$1 want=$2 t0 rc
	rm -f "$tmp/err"
	shift 2
	t0=$(ms)
	env "$@" timeout 60 "$bin" run "${image[@]}" --quiet -- true >"$tmp/stdout" 2>"$tmp/err" </dev/null
	rc=$?
	elapsed=$(($(ms) - t0))
	[ $rc != 0 ] && grep -Eq -- "$want" "$tmp/err"
	ok $? "$name (rc $rc, $elapsed ms)"
	sed 's/^/#   /' "$tmp/err" | tail -2
}
fails "a server certificate from another CA: a clear TLS error" 'TLS connection to .* failed: SSL certificate problem' \
	DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/wrongca
fails "a client certificate the engine does not trust: refused, saying what to check" \
	"TLS connection to '$url' failed: .*does the engine trust the CA of cert.pem\\? DOCKER_CERT_PATH '$certs/foreign'" \
	DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/foreign
fails "no client certificate: an error naming the missing file" "$certs/nocert/cert.pem" \
	DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/nocert
fails "a missing DOCKER_CERT_PATH: an error naming ca.pem there" "$tmp/nowhere/ca.pem" \
	DOCKER_HOST=$url DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$tmp/nowhere
fails "plain http to the TLS port: refused" "engine|HTTPS|400" DOCKER_HOST=$url
# 192.0.2.1 (TEST-NET-1) routes nowhere: a connection attempt would take the
# 5 s ping timeout, so an answer well before it (4 s: room for a loaded
# machine) was refused before connecting.
fails "plain tcp to a non-loopback address: refused, naming the variables" \
	'plain tcp is allowed to a loopback address only.*DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH' \
	DOCKER_HOST=tcp://192.0.2.1:2375
[ "$elapsed" -lt 4000 ]
ok $? "... and before any connection ($elapsed ms)"

# The engine itself insists on a client certificate (not only our client).
curl -s --max-time 10 --cacert "$certs/client/ca.pem" "https://127.0.0.1:$port/_ping" >/dev/null 2>&1
[ $? != 0 ]
ok $? "dockerd refuses a TLS client without a certificate"
# This test's containers only (its output root's label, tests/e2e/lib/left.sh):
# tests/run-dockerd.sh runs other tests on the same engine beside it.
. "${top_srcdir:-$(dirname -- "$0")/../..}/tests/e2e/lib/left.sh"
left=$(curl -s --max-time 10 --cacert "$certs/client/ca.pem" --cert "$certs/client/cert.pem" \
	--key "$certs/client/key.pem" -G "https://127.0.0.1:$port/containers/json" --data-urlencode all=1 \
	--data-urlencode "filters={\"label\":[\"$(root_label "$DEMESNE_OUTPUT_ROOT")\"]}")
[ "$left" = "[]" ]
ok $? "no container of this test's is left on the engine ($left)"
echo "1..$n"
[ $failed = 0 ]
