#!/usr/bin/env bash
# Runs what scripts/gpu_bundle.sh gathered, on a machine with a GPU, from the
# root of a checkout (the LLaMA check reads tests/llama/llama_reference.py
# and needs python3 with PyTorch). Writes one log per step to OUT_DIR
# (default ./gpu-logs) and a summary line per step to OUT_DIR/summary.txt.
set -uo pipefail
out="${1:-gpu-logs}"
mkdir -p "${out}"
here="$(cd "$(dirname "$0")" && pwd)"
# NCCL may come with the CUDA Toolkit or only as a Python wheel.
nccl="$(dirname "$(find /usr/local/cuda/ /usr/lib /opt /usr/local/lib \
  -name 'libnccl.so.2*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH="${here}/lib:/usr/local/cuda/lib64:${nccl}:${LD_LIBRARY_PATH:-}"
export TESSERAD="${here}/bin/tesserad"
nvidia-smi >"${out}/nvidia-smi.txt" 2>&1

step() {
  local name="$1"
  shift
  local start=$SECONDS
  timeout "${STEP_TIMEOUT:-300}" "$@" >"${out}/${name}.log" 2>&1
  local rc=$?
  echo "${name}: rc=${rc} $((SECONDS - start))s" | tee -a "${out}/summary.txt"
}

step cuda_device_test "${here}/bin/cuda_device_test"
step cuda_oom_test "${here}/bin/cuda_oom_test"
step foreign_waits_test "${here}/bin/foreign_waits_test"
step nccl_communicator_test "${here}/bin/nccl_communicator_test"
step conformance_test "${here}/bin/conformance_test"
step gpu_scheduler_test "${here}/bin/gpu_scheduler_test"
step remote_device_test "${here}/bin/remote_device_test"
step llama_check_test "${here}/bin/llama_check_test"
step cuda_ops "${here}/bin/cuda_ops"
# LLaMA 1.1B-shaped decode on the GPU (bench/llama's header has the shape).
step llama_gpu "${here}/bin/llama" --modes=gpu --layers=16 --dim=2048 \
  --ff=8192 --heads=32 --kv_heads=8 --vocab=32000 --prompt=512 --decode=128 \
  --rounds=3

# The daemon serving every device, and the CLI listing and benchmarking it.
port_file="$(mktemp)"
"${here}/bin/tesserad" --devices=all --listen=127.0.0.1:0 \
  --port_file="${port_file}" >"${out}/tesserad.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -s "${port_file}" ] && break; sleep 0.2; done
target="127.0.0.1:$(cat "${port_file}")"
step cli_devices "${here}/bin/tessera" --target="${target}" devices
step cli_bench "${here}/bin/tessera" --target="${target}" bench
step transfer "${here}/bin/transfer" --target="${target}" --device=cuda0 \
  --mib=1024 --reps=3
kill -TERM "${daemon}"
wait "${daemon}"
echo "tesserad drain: rc=$?" | tee -a "${out}/summary.txt"
