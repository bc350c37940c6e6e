#!/usr/bin/env bash
# Builds the tests and tools that need a GPU (sm_80/sm_90) and packs them,
# stripped, with the non-CUDA shared libraries they load and
# scripts/gpu_run.sh, into .gpu/bundle.tar.xz (ignored by git), so that a
# machine with a GPU and CUDA but without Bazel or gRPC can run them:
#
#   scripts/gpu_bundle.sh                      # here: build and pack
#   mkdir -p /tmp/g && tar xJf .gpu/bundle.tar.xz -C /tmp/g &&
#     /tmp/g/gpu_run.sh OUT_DIR                # there, from a checkout's
#                                              # root: run, logs in OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(
  //backend/cuda:cuda_device_test
  //backend/cuda:cuda_oom_test
  //backend/cuda:foreign_waits_test
  //backend/comm:nccl_communicator_test
  //tests/conformance:conformance_test
  //sched:gpu_scheduler_test
  //tests/integration:remote_device_test
  //tests/llama:llama_check_test
  //server:tesserad
  //client:tessera
  //bench:cuda_ops
  //bench:llama
  //bench:transfer
)
bazel build -c opt "${targets[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
mkdir -p "${stage}/bin" "${stage}/lib"
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "${exclude}")"
grep -qxF '/.gpu/' "${exclude}" 2>/dev/null || echo '/.gpu/' >>"${exclude}"
bin="$(bazel info -c opt bazel-bin)"
for target in "${targets[@]}"; do
  path="${target#//}"
  path="${path/://}"
  cp "${bin}/${path}" "${stage}/bin/"
done
# Shared libraries outside the system's and CUDA's own (the GPU machine has
# CUDA; Debian's gRPC, protobuf, absl, spdlog, OpenBLAS and friends it lacks).
for target in "${targets[@]}"; do
  path="${target#//}"
  ldd "${bin}/${path/://}" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "${lib}" in
    */libcuda.so* | */libcudart* | */libcublas* | */libnccl* | */libc.so* | \
      */libm.so* | */libpthread* | */libdl.so* | */librt.so* | \
      */ld-linux*) ;;
    *) cp -L "${lib}" "${stage}/lib/" ;;
  esac
done
strip --strip-unneeded "${stage}"/bin/* "${stage}"/lib/*
cp scripts/gpu_run.sh "${stage}/"
rm -rf .gpu
mkdir -p .gpu
tar -cJf .gpu/bundle.tar.xz -C "${stage}" .
du -sh .gpu/bundle.tar.xz
