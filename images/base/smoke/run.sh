#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the base image, run in a sandbox by tests/e2e/image-smoke.mjs.
fails=0
check() {
	local what=$1
	shift
	if out=$("$@" 2>&1); then
		echo "ok   $what${out:+: $(printf '%s' "$out" | head -n1)}"
	else
		echo "FAIL $what: $(printf '%s' "$out" | tail -n3 | tr '\n' ' ')"
		fails=$((fails + 1))
	fi
}
check "bash" bash -c 'echo "$BASH_VERSION"'
check "curl" curl --version
check "git" git --version
check "git repo" bash -c 'cd /tmp && git init -q r && cd r && echo hi >f && git add f &&
	git -c user.name=smoke -c user.email=smoke@localhost commit -qm init && git log --oneline'
check "ps" bash -c 'ps --version && ps -e -o pid=,comm= | grep -q bash'
check "ca bundle" test -s /etc/ssl/certs/ca-certificates.crt
check "dirs /in /out /workspace" test -d /in -a -d /out -a -d /workspace
check "workdir /out" test "$PWD" = /out
check "LANG C.UTF-8" bash -c 'test "$LANG" = C.UTF-8 && printf "\u00e9" | grep -q .'
check "apt sources" grep -q 'bookworm-security' /etc/apt/sources.list
check "apt lists cleaned" bash -c '! ls /var/lib/apt/lists/ | grep -q _Packages'
check "apt consistent" apt-get check -qq
check "policy-rc.d" bash -c '/usr/sbin/policy-rc.d; test $? = 101'
exit "$fails"
