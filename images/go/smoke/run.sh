#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the demesne "go" image, run inside a fresh sandbox with no
# network (cwd /out, this folder read-only at /in/smoke): builds, tests and
# runs a stdlib-only module, then a cgo one. Exit 0 = pass.
set -euo pipefail
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)

v=$(go version)
[[ $v == "go version go1."* ]] || { echo "FAIL go version: $v"; exit 1; }
echo "ok: $v"
[[ $(go env GOTOOLCHAIN) == local ]] || { echo "FAIL GOTOOLCHAIN=$(go env GOTOOLCHAIN)"; exit 1; }
[[ $(go env GOPROXY) == https://* ]] || { echo "FAIL GOPROXY=$(go env GOPROXY)"; exit 1; }
echo "ok: GOTOOLCHAIN=local GOPROXY=$(go env GOPROXY)"

work=$(mktemp -d)
cp -r "$here/hello" "$work/"
cd "$work/hello"
go vet ./...
echo "ok: go vet"
go test ./... | sed 's/\t(cached)//; s/\t[0-9.]*s$//' | sed 's/^/ok: go test: /'
go build -o /out/hello .
/out/hello >/out/hello.json
grep -q '"counts":{.*"the":3' /out/hello.json || { echo "FAIL program output: $(cat /out/hello.json)"; exit 1; }
echo "ok: go build + run ($(stat -c %s /out/hello) bytes)"

mkdir "$work/cgo" && cd "$work/cgo"
printf 'module example.com/cgo\n\ngo 1.21\n' >go.mod
cat >main.go <<'GO'
package main

// int twice(int x) { return 2 * x; }
import "C"
import "fmt"

func main() { fmt.Println(C.twice(21)) }
GO
[[ $(CGO_ENABLED=1 go run .) == 42 ]] || { echo "FAIL cgo"; exit 1; }
echo "ok: cgo (gcc $(gcc -dumpversion))"
