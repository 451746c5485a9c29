#!/bin/sh
# Makes a throwaway PKI for the TLS tests in DIR (all keys EC P-256, valid for 2 days):
#   ca, other-ca, ca2                    three unrelated CAs
#   server    localhost + 127.0.0.1, by ca       server-other  the same names, by other-ca
#   server2   the same names, by ca2 (reload)    expired       by ca, valid only in January 2020
#   client    clientAuth, by ca (mTLS)           client-other  clientAuth, by other-ca
# Usage: make_test_pki.sh DIR
set -eu
cd "$1"
cat > ca.cnf <<'CNF'
[ca]
default_ca = test
[test]
database = index.txt
new_certs_dir = .
default_md = sha256
policy = any
serial = serial
copy_extensions = copy
unique_subject = no
[any]
commonName = supplied
CNF
: > index.txt
echo 1000 > serial
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
root() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
# leaf NAME CA EXTENSION [START END]
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" -addext "$3"
  if [ $# -ge 5 ]; then dates="-startdate $4 -enddate $5"; else dates="-days 2"; fi
  # shellcheck disable=SC2086
  openssl ca -batch -notext -config ca.cnf -cert "$2.pem" -keyfile "$2.key" -in "$1.csr" -out "$1.pem" \
    $dates 2>/dev/null
}
names="subjectAltName=DNS:localhost,IP:127.0.0.1"
root ca "Substatus Test CA"
root other-ca "Other Test CA"
root ca2 "Substatus Test CA 2"
leaf server ca "$names"
leaf server-other other-ca "$names"
leaf server2 ca2 "$names"
leaf expired ca "$names" 20200101000000Z 20200102000000Z
leaf client ca "extendedKeyUsage=clientAuth"
leaf client-other other-ca "extendedKeyUsage=clientAuth"
