#!/usr/bin/env bash
# Renders the overlays and the chart, then runs manifests_test.js on them.
set -euo pipefail
NODE_PATH="$(npm root -g 2>/dev/null)"
export NODE_PATH
out="${TEST_TMPDIR}/rendered"
mkdir -p "$out"
tests/deploy/render_all.sh "$out"
server/tesserad --help > "${TEST_TMPDIR}/tesserad_help.txt"
RENDERED="$out" TESSERAD=server/tesserad TESSERAD_HELP="${TEST_TMPDIR}/tesserad_help.txt" \
  LWS_CRD=deploy/k8s/schemas/leaderworkerset.x-k8s.io_leaderworkersets.json \
  exec node --test tests/deploy/manifests_test.js
