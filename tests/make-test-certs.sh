#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# tests/make-test-certs.sh DIR: a throwaway PKI for tests of a TLS engine
# (tests/run-dockerd.sh), made with openssl in DIR (which must exist):
#   DIR/server/{ca.pem,cert.pem,key.pem}  for dockerd --tlsverify (SAN IP 127.0.0.1, ::1)
#   DIR/client/{ca.pem,cert.pem,key.pem}  a DOCKER_CERT_PATH that works
#   DIR/wrongca/...   the client certificate, but a ca.pem from another CA
#   DIR/foreign/...   the right ca.pem, a client certificate from another CA
#   DIR/nocert/ca.pem the right ca.pem alone (cert.pem and key.pem missing)
# Keys are EC P-256 (fast); certificates are valid for one day.
set -euo pipefail
d=${1:?usage: make-test-certs.sh DIR}
cd "$d"
umask 077
ossl() { openssl "$@" 2>/dev/null; }
ca() { # name
	ossl ecparam -name prime256v1 -genkey -noout -out "$1-key.pem"
	ossl req -x509 -new -key "$1-key.pem" -subj "/CN=demesne test $1" -days 1 -out "$1.pem" \
		-addext basicConstraints=critical,CA:true -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # ca name ext
	ossl ecparam -name prime256v1 -genkey -noout -out "$2-key.pem"
	ossl req -new -key "$2-key.pem" -subj "/CN=$2" -out "$2.csr"
	printf '%s\n' "$3" >"$2.ext"
	ossl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1-key.pem" -CAcreateserial -days 1 \
		-extfile "$2.ext" -out "$2-cert.pem"
}
ca ca
ca other
leaf ca server "subjectAltName=IP:127.0.0.1,IP:::1
extendedKeyUsage=serverAuth"
leaf ca client "extendedKeyUsage=clientAuth"
leaf other stranger "extendedKeyUsage=clientAuth"
mkdir -p server client wrongca foreign nocert
cp ca.pem server/ca.pem && cp server-cert.pem server/cert.pem && cp server-key.pem server/key.pem
cp ca.pem client/ca.pem && cp client-cert.pem client/cert.pem && cp client-key.pem client/key.pem
cp other.pem wrongca/ca.pem && cp client-cert.pem wrongca/cert.pem && cp client-key.pem wrongca/key.pem
cp ca.pem foreign/ca.pem && cp stranger-cert.pem foreign/cert.pem && cp stranger-key.pem foreign/key.pem
cp ca.pem nocert/ca.pem
