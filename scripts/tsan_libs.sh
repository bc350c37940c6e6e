#!/usr/bin/env bash
# Prepares `bazel test --config=tsan`: rebuilds the installed Debian Abseil
# and gRPC from their Debian sources with ThreadSanitizer into .tsan/lib
# (same versions, patches, options and sonames, so the tests load them in
# place of the system's), and writes .tsan/tsan.bazelrc, which .bazelrc
# imports, giving TSan binaries their directory as a run path. Without
# them TSan sees neither absl::Mutex nor gRPC's own hand-offs between
# threads and reports every access they order. Takes about ten minutes on
# two cores, once; safe to run again. Run as root (or with sudo available).
#
#   scripts/tsan_libs.sh && bazel test --config=tsan //...
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="${root}/.tsan"
# The source packages the installed libraries were built from.
absl="$(dpkg-query -W -f='${source:Package}=${source:Version}' libabsl-dev)"
grpc="$(dpkg-query -W -f='${source:Package}=${source:Version}' libgrpc++-dev)"
version="${absl} ${grpc}"

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

if [ "$(cat "${out}/version" 2>/dev/null)" != "${version}" ]; then
  need=()
  for p in dpkg-dev cmake ninja-build g++; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      need+=("$p")
  done
  # Debian's source archive, for apt-get source.
  if ! grep -rqs '^Types: deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    . /etc/os-release
    $sudo tee /etc/apt/sources.list.d/tessera-deb-src.sources >/dev/null <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME} ${VERSION_CODENAME}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: ${VERSION_CODENAME}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
  $sudo apt-get update -q
  if [ "${#need[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
      --no-install-recommends "${need[@]}"
  fi

  work="$(mktemp -d)"
  trap 'rm -rf "${work}"' EXIT
  # Debian's configurations (debian/rules), with TSan and -O2 as Debian
  # builds them, so that the same inline functions are exported.
  flags="-fsanitize=thread -O2 -g1 -fstack-protector-strong -D_FORTIFY_SOURCE=2"
  common=(-G Ninja -DCMAKE_BUILD_TYPE=None -DBUILD_SHARED_LIBS=ON
    -DCMAKE_C_FLAGS="${flags}" -DCMAKE_CXX_FLAGS="${flags}"
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread
    -DCMAKE_INSTALL_PREFIX="${work}/prefix" -DCMAKE_INSTALL_LIBDIR=lib)
  (cd "${work}" && apt-get source -q "${absl}" "${grpc}")
  absl_src="$(find "${work}" -maxdepth 1 -type d -name 'abseil-*' | head -1)"
  grpc_src="$(find "${work}" -maxdepth 1 -type d -name 'grpc-*' | head -1)"
  cmake -S "${absl_src}" -B "${work}/absl" "${common[@]}" -DCMAKE_CXX_STANDARD=17
  ninja -C "${work}/absl" install
  # gRPC's libraries only (no code generators, so no libprotoc), against the
  # TSan Abseil and the system's other libraries, as Debian builds it.
  cmake -S "${grpc_src}" -B "${work}/grpc" "${common[@]}" \
    -DCMAKE_PREFIX_PATH="${work}/prefix" -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_BUILD_CODEGEN=OFF -DProtobuf_PROTOC_LIBRARY=unused \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package \
    -DgRPC_PROTOBUF_PROVIDER=package -DgRPC_RE2_PROVIDER=package \
    -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF
  grpc_libs=(libgrpc++.so libgrpc.so libgpr.so libupb.so libaddress_sorting.so)
  ninja -C "${work}/grpc" "${grpc_libs[@]}"
  rm -rf "${out}"
  mkdir -p "${out}/lib"
  cp -a "${work}/prefix/lib/"*.so* "${out}/lib/"
  for lib in "${grpc_libs[@]}"; do cp -a "${work}/grpc/${lib}"* "${out}/lib/"; done
  echo "${version}" >"${out}/version"
fi

cat >"${out}/tsan.bazelrc" <<RC
# Written by scripts/tsan_libs.sh: TSan binaries load these libraries.
build:tsan --linkopt=-Wl,-rpath,${out}/lib
RC
echo "TSan builds of ${version} in ${out}/lib; now: bazel test --config=tsan //..."
