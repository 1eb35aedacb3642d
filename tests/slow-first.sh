#!/bin/sh
# SPDX-License-Identifier: MIT
# Prints the tests named as arguments on one line, the suite's slowest first
# (the list below, longest first), the others in the order given.
#   tests/slow-first.sh $(TESTS)
# `make -jN check` starts its tests in the order of TESTS: a long test that
# happens to come last keeps the whole suite waiting on it alone, as
# test-http-load (about a minute) did at the end of Makefile.am's list.
# tests/run.sh and tests/run-rootless.sh use it for a whole suite. The list
# is the "slowest tests" that tests/run.sh prints, from idle ASan runs on 2
# cores; a test not in it, or gone from the suite, changes nothing but the
# order.
slow='tests/integration/test-http-load
tests/integration/test-backend-conformance
tests/e2e/test-nested-admission.sh
tests/e2e/test-examples.sh
tests/integration/test-http-hostile
tests/integration/test-opensandbox-pool
tests/security/test-limits.mjs
tests/security/test-memory-pids.sh
tests/security/test-hostmcp-hostile.sh
tests/e2e/client-tasks.mjs
tests/security/test-usage-forgery.sh
tests/e2e/client-agents.mjs'
first='' rest=''
for s in $slow; do
	for t in "$@"; do [ "$t" = "$s" ] && first="$first $t"; done
done
for t in "$@"; do
	case " $first " in *" $t "*) ;; *) rest="$rest $t" ;; esac
done
echo $first $rest
