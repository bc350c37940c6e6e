#!/usr/bin/env bash
# Builds the tessera container images from Debian 12 packages only, with no
# container registry:
#   cpu  tesserad and the tessera CLI built without CUDA, on a root
#        filesystem holding only the Debian packages of the shared libraries
#        they load (found with ldd and dpkg -S), a non-root user (10001,
#        "tessera") and nothing else: no shell, no package manager.
#   gpu  the cpu image plus a layer with the CUDA builds of both binaries and
#        the CUDA runtime, cuBLAS and NCCL libraries they load, copied from
#        the local CUDA Toolkit ($CUDA_PATH, else /usr/local/cuda). The
#        driver (libcuda) comes from the node.
#
# Output, under OUT_DIR (default /var/tmp/tessera-image; outside the
# workspace, where `bazel test //...` would walk into the root filesystem):
#   oci/               an OCI image layout with the tags cpu and gpu
#   rootfs-cpu/        the cpu image's root filesystem (for chroot checks)
#   packages.txt       the Debian packages the binaries need
#
# Usage: deploy/build-image.sh [OUT_DIR]   (as root; needs network access
# to the Debian archive through apt's configured sources)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-/var/tmp/tessera-image}" && cd "${1:-/var/tmp/tessera-image}" && pwd)"
cuda="${CUDA_PATH:-/usr/local/cuda}"
suite=bookworm
uid=10001

need=()
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [ "${#need[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# ---- Binaries: without CUDA for the cpu image, with it for the gpu image.
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage/cpu" "$stage/gpu"
build() {  # build DEST [bazel flags...]
  local dest="$1"
  shift
  (cd "$repo" && bazel build -c opt "$@" //server:tesserad //client:tessera)
  local bin
  bin="$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)"
  install -m 0755 "$bin/server/tesserad" "$bin/client/tessera" "$dest/"
}
build "$stage/cpu" --repo_env=CUDA_PATH=/nonexistent
gpu=0
if [ -x "$cuda/bin/nvcc" ]; then
  build "$stage/gpu" --repo_env=CUDA_PATH="$cuda"
  gpu=1
else
  echo "no CUDA Toolkit at $cuda: building the cpu image only"
fi

# ---- The Debian packages that hold the libraries the binaries load.
libraries() {  # the resolved path of every library ldd lists for the files
  # (ldd names each file on a line ending in ":" when given several.)
  ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*[^:]$/ {print $1}' | sort -u
}
# The Debian packages that own the given library files, with one dpkg -S
# over every name a file may be known by (merged /usr: /lib or /usr/lib; a
# link or its target).
packages_of() {
  local lib real p pkg names=() owners
  for lib; do
    real="$(readlink -f "$lib")"
    names+=("$lib" "$real" "${lib#/usr}" "${real#/usr}" "/usr$lib" "/usr$real")
  done
  owners="$(dpkg -S "${names[@]}" 2>/dev/null || true)"
  for lib; do
    real="$(readlink -f "$lib")"
    pkg=""
    for p in "$lib" "$real" "${lib#/usr}" "${real#/usr}" "/usr$lib" "/usr$real"; do
      pkg="$(awk -F': ' -v p="$p" '$2 == p {print $1; exit}' <<< "$owners")"
      [ -n "$pkg" ] && break
    done
    [ -n "$pkg" ] || { echo "no Debian package holds $lib" >&2; return 1; }
    echo "$pkg" | tr ',' '\n' | sed 's/ //g; s/:.*//'
  done
}
binaries=("$stage/cpu/tesserad" "$stage/cpu/tessera")
[ "$gpu" = 1 ] && binaries+=("$stage/gpu/tesserad" "$stage/gpu/tessera")
debian_libraries=()
for lib in $(libraries "${binaries[@]}"); do
  case "$(readlink -f "$lib")" in
    "$(readlink -f "$cuda")"/*) ;;  # from the toolkit, in the gpu layer
    *) debian_libraries+=("$lib") ;;
  esac
done
packages_of "${debian_libraries[@]}" > "$out/packages.txt"
sort -u -o "$out/packages.txt" "$out/packages.txt"
echo "Debian packages: $(tr '\n' ' ' < "$out/packages.txt")"

# ---- The root filesystem: those packages and their dependencies, unpacked
# (no maintainer scripts run: nothing in it ever runs but the binaries).
rootfs="$out/rootfs-cpu"
rm -rf "$rootfs"
sources=/etc/apt/sources.list.d/debian.sources  # the archive as apt reaches it
[ -f "$sources" ] || sources=/etc/apt/sources.list
mmdebstrap --quiet --variant=extract --mode=root --format=directory \
  --include="$(paste -sd, "$out/packages.txt")" "$suite" "$rootfs" "$sources"
rm -rf "$rootfs/var/cache/apt" "$rootfs/var/lib/apt/lists" "$rootfs/usr/share/doc" \
  "$rootfs/usr/share/man" "$rootfs/usr/share/locale"

# Links that maintainer scripts would have made (update-alternatives: BLAS):
# each library at the path the loader found it at here.
for lib in "${debian_libraries[@]}"; do
  if [ ! -e "$rootfs$lib" ]; then
    test -e "$rootfs$(readlink -f "$lib")" || { echo "$lib is missing" >&2; exit 1; }
    ln -sfn "$(readlink -f "$lib")" "$rootfs$lib"
  fi
done
ldconfig -r "$rootfs"

cat > "$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
tessera:x:$uid:$uid:tessera:/var/lib/tessera:/usr/sbin/nologin
EOF
cat > "$rootfs/etc/group" <<EOF
root:x:0:
tessera:x:$uid:
EOF
install -d -m 0755 -o "$uid" -g "$uid" "$rootfs/var/lib/tessera" "$rootfs/var/cache/tessera"
# Mount points: the pod's Secret, the port file of checks, /proc.
install -d -m 0755 "$rootfs/etc/tessera/secret" "$rootfs/run/tessera" "$rootfs/proc"
install -d -m 1777 "$rootfs/tmp"
install -d -m 0755 "$rootfs/usr/bin"
install -m 0755 "$stage/cpu/tesserad" "$stage/cpu/tessera" "$rootfs/usr/bin/"
chroot "$rootfs" /usr/bin/tesserad --help > /dev/null  # every library resolves

# ---- The OCI images.
oci="$out/oci"
rm -rf "$oci"
umoci init --layout "$oci"
umoci new --image "$oci:cpu"
umoci insert --image "$oci:cpu" --history.comment "Debian 12 runtime libraries and tessera" \
  "$rootfs" /
configure() {  # configure TAG
  umoci config --image "$oci:$1" --author "tessera" \
    --config.user "$uid:$uid" --config.workingdir /var/lib/tessera \
    --config.entrypoint /usr/bin/tesserad --clear config.cmd \
    --config.env PATH=/usr/bin \
    --config.env TESSERA_LISTEN=0.0.0.0:50051 \
    --config.env TESSERA_CACHE_DIR=/var/cache/tessera \
    --config.exposedports 50051/tcp --config.exposedports 9090/tcp \
    --config.volume /var/cache/tessera \
    --config.label org.opencontainers.image.title=tessera \
    --config.label "org.opencontainers.image.description=tesserad ($1)"
}
configure cpu

if [ "$gpu" = 1 ]; then
  # The CUDA libraries the gpu binaries load, with their soname links.
  layer="$stage/gpu-layer"
  mkdir -p "$layer/usr/bin" "$layer/usr/lib/x86_64-linux-gnu"
  install -m 0755 "$stage/gpu/tesserad" "$stage/gpu/tessera" "$layer/usr/bin/"
  for lib in $(libraries "$stage/gpu/tesserad" "$stage/gpu/tessera"); do
    case "$(readlink -f "$lib")" in
      "$(readlink -f "$cuda")"/*)
        real="$(readlink -f "$lib")"
        cp "$real" "$layer/usr/lib/x86_64-linux-gnu/"
        if [ "$(basename "$real")" != "$(basename "$lib")" ]; then
          ln -s "$(basename "$real")" "$layer/usr/lib/x86_64-linux-gnu/$(basename "$lib")"
        fi
        ;;
    esac
  done
  umoci tag --image "$oci:cpu" gpu
  umoci insert --image "$oci:gpu" --history.comment "CUDA runtime, cuBLAS, NCCL; CUDA builds" \
    "$layer/usr" /usr
  configure gpu
  # What a GPU node's container runtime needs to mount the driver.
  umoci config --image "$oci:gpu" --config.env NVIDIA_VISIBLE_DEVICES=all \
    --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility
fi
umoci gc --layout "$oci"
rm -rf "$stage"
echo "images: $(umoci ls --layout "$oci" | tr '\n' ' ') in $oci"
du -sh "$oci"
