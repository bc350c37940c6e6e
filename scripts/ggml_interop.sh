#!/usr/bin/env bash
# Runs ggml's own RPC client, the code llama.cpp's --rpc links, against
# tesserad's ggml-rpc listener: builds ggml (with GGML_RPC) from a checkout
# of ggml-org/ggml (protocol 5.1.0, as at commit d99724f), builds
# tests/ggml_rpc/interop/ggml_client.cc against it and an opt tesserad,
# starts the daemon on loopback and runs the client (what it checks and its
# bounds: the client's header). Needs cmake, ninja and a C++17 compiler;
# the builds go to a temporary folder, removed at the end.
#
#   scripts/ggml_interop.sh GGML_CHECKOUT
set -euo pipefail
if [[ $# -ne 1 || ! -f "$1/include/ggml-rpc.h" ]]; then
  echo "usage: $0 GGML_CHECKOUT (a checkout of ggml-org/ggml)" >&2
  exit 2
fi
ggml="$(readlink -f "$1")"
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
daemon=""
cleanup() {
  if [[ -n "${daemon}" ]]; then kill "${daemon}" 2>/dev/null || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT

cmake -S "${ggml}" -B "${work}/ggml" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_RPC=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null
ninja -C "${work}/ggml" >/dev/null
libs="${work}/ggml/src:${work}/ggml/src/ggml-rpc"
c++ -O2 -std=c++17 tests/ggml_rpc/interop/ggml_client.cc -I"${ggml}/include" \
  -L"${work}/ggml/src" -L"${work}/ggml/src/ggml-rpc" \
  -lggml -lggml-base -lggml-cpu -lggml-rpc -Wl,-rpath,"${libs}" \
  -o "${work}/ggml_client"

# bazel-bin names the configuration built last: this one.
bazel build -c opt //server:tesserad
cp bazel-bin/server/tesserad "${work}/tesserad"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${work}/tesserad" --devices=cpu --listen=127.0.0.1:0 \
  --ggml_rpc_listen="127.0.0.1:${port}" >"${work}/tesserad.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do
  if grep -q "ggml-rpc .* listening" "${work}/tesserad.log" 2>/dev/null; then break; fi
  sleep 0.1
done
"${work}/ggml_client" "127.0.0.1:${port}"
