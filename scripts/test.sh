#!/usr/bin/env bash
# The test suite: every test, then the daemon's tests again under ASan and
# UBSan (the graph, server, integration and fuzz tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel test //...
bazel test --config=asan //graph/... //server/... //tests/integration/... //tests/fuzz/...
