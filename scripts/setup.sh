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
