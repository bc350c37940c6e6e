#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing tessera need.
# Safe to run more than once. Run as root (or with sudo available).
set -euo pipefail

packages=(
  bazel-bootstrap bazel-platforms bazel-rules-java
  g++ pkg-config
  libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler
  protobuf-compiler-grpc
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libxxhash-dev libcpp-httplib-dev
  openssl curl
  python3 python3-grpcio python3-protobuf python3-numpy python3-torch
)

# The deployment checks (tests/deploy) run kubectl and node; keep any that
# the machine already has from elsewhere.
command -v kubectl >/dev/null || packages+=(kubernetes-client)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "Installing: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
else
  echo "All build packages are installed."
fi

# npm packages of the deployment checks: Kubernetes API schema validators
# and a YAML parser, installed globally (`npm root -g`).
npm_packages=(
  kubernetes-models@4.5.1 @kubernetes-models/prometheus-operator@4.4.4
  js-yaml@4.1.0
)
npm_root="$(npm root -g)"
npm_missing=()
for p in "${npm_packages[@]}"; do
  name="${p%@*}"
  version="${p##*@}"
  # Installed at that version, and loads (its dependencies are there too).
  grep -q "\"version\": \"${version}\"" "$npm_root/$name/package.json" 2>/dev/null &&
    NODE_PATH="$npm_root" node -e "require('$name/package.json'); require('$name')" \
      2>/dev/null ||
    npm_missing+=("$p")
done
if [ "${#npm_missing[@]}" -gt 0 ]; then
  echo "Installing npm packages: ${npm_missing[*]}"
  $sudo npm install -g --no-audit --no-fund "${npm_missing[@]}"
else
  echo "All npm packages are installed."
fi
