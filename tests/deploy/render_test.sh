#!/usr/bin/env bash
set -euo pipefail
NODE_PATH="$(npm root -g 2>/dev/null)"
export NODE_PATH
exec node --test tests/deploy/render_test.js
