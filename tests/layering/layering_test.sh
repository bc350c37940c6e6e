#!/usr/bin/env bash
# Fails when a layer includes what it must not know (ARCHITECTURE.md):
#   1. graph/ (the IR) and base/ include nothing of backend/, sched/,
#      server/, client/ or proto/;
#   2. under backend/, only backend/assembly names a concrete backend
#      (backend/cpu, backend/cuda), and no backend names another;
#   3. nothing under graph/, base/, backend/ or sched/ includes gRPC,
#      protobuf or generated protocol headers;
#   4. model/ (model files and the LLaMA architecture) uses graph/ and
#      base/ only;
#   5. runner/ (the model runner) names no concrete backend and no server,
#      and nothing below it (graph/, base/, backend/, sched/, model/,
#      proto/, server/) includes it.
#   6. python/ (the Python client) uses proto/ only: its BUILD files name
#      no other package's targets but the daemon its tests start.
# Tests (*_test.cc) and test fakes (*/testing/*) sit above every layer and
# may use concrete devices. The tree is found through the WORKSPACE file
# this test carries.
set -euo pipefail

workspace="$(readlink -f "${TEST_SRCDIR}/${TEST_WORKSPACE}/WORKSPACE")"
root="$(dirname "${workspace}")"
cd "${root}"

failures=0

# Prints "file:line: include" for every #include in the library sources of
# `folder` (tests and test fakes left out) that matches the regex `pattern`.
includes_matching() {
  local folder="$1" pattern="$2"
  find "${folder}" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \
    -o -name '*.cuh' -o -name '*.inc' \) ! -name '*_test.cc' ! -path '*/testing/*' -print0 |
    xargs -0 --no-run-if-empty grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"](${pattern})" ||
    true
}

# rule NAME FOLDER PATTERN [EXCEPT_FOLDER]
rule() {
  local name="$1" folder="$2" pattern="$3" except="${4:-}"
  local hits
  hits="$(includes_matching "${folder}" "${pattern}")"
  if [[ -n "${except}" ]]; then
    hits="$(grep -Ev "^(${except})/" <<<"${hits}" || true)"
  fi
  if [[ -n "${hits}" ]]; then
    echo "FAIL ${name}:"
    sed 's/^/  /' <<<"${hits}"
    failures=$((failures + 1))
  else
    echo "ok   ${name}"
  fi
}

project='backend/|sched/|server/|client/|proto/|python/|runner/'
wire='grpc|grpcpp/|google/protobuf/|proto/|[^"]*\.pb\.h'

rule "graph/ includes no other layer" graph "${project}"
rule "base/ includes no other layer" base "${project}|graph/"
rule "the device API and allocators name no concrete backend" backend \
  'backend/(cpu|cuda|meta)/' 'backend/(cpu|cuda|meta|assembly)'
rule "the CPU backend names no other backend" backend/cpu 'backend/(cuda|meta|assembly)/'
rule "the CUDA backend names no other backend" backend/cuda 'backend/(cpu|meta|assembly)/'
rule "the meta backend names no other backend" backend/meta 'backend/(cpu|cuda|assembly)/'
rule "sched/ names no concrete backend and no server or client" sched \
  'backend/(cpu|cuda|meta|assembly)/|server/|client/'
rule "model/ uses graph/ and base/ only" model "${project}"
rule "runner/ names no concrete backend and no server" runner \
  'backend/(cpu|cuda|meta|assembly)/|server/'
for layer in backend proto server; do
  rule "${layer}/ does not include runner/" "${layer}" 'runner/'
done
for layer in graph base backend sched model; do
  rule "${layer}/ knows no gRPC, protobuf or wire format" "${layer}" "${wire}"
done

# python/ has no C++ includes: its Bazel labels are what it uses.
python_hits="$(find python -name BUILD -o -name BUILD.bazel -o -name '*.bzl' |
  xargs --no-run-if-empty grep -HnoE '"//[^"]*"' |
  grep -vE ':"//(proto|python)(/[^":]*)?(:[^"]*)?"$' |
  grep -vE ':"//(server:tesserad|visibility:[a-z]+)"$' || true)"
if [[ -n "${python_hits}" ]]; then
  echo "FAIL python/ uses proto/ only:"
  sed 's/^/  /' <<<"${python_hits}"
  failures=$((failures + 1))
else
  echo "ok   python/ uses proto/ only"
fi

if ((failures > 0)); then
  echo "${failures} layering rule(s) broken"
  exit 1
fi
echo "all layering rules hold"
