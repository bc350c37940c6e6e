#!/usr/bin/env bash
# Writes the files the tessera-auth Secret is made from into
# deploy/k8s/base/secrets/: a random bearer token and a self-signed TLS
# certificate and key for the Service's names. Existing files are kept.
# Usage: deploy/k8s/make-secrets.sh [NAMESPACE]
set -euo pipefail
namespace="${1:-default}"
dir="$(cd "$(dirname "$0")" && pwd)/base/secrets"
mkdir -p "$dir"
umask 077
if [ ! -s "$dir/token" ]; then
  openssl rand -hex 32 > "$dir/token"
fi
if [ ! -s "$dir/tls.crt" ] || [ ! -s "$dir/tls.key" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -days 365 -subj "/CN=tessera" \
    -addext "subjectAltName=DNS:tessera,DNS:tessera.${namespace},DNS:tessera.${namespace}.svc,DNS:*.tessera-group.${namespace}.svc" \
    -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
fi
echo "secrets in $dir"
