#!/usr/bin/env bash
# Renders every kustomize overlay and the Helm chart (with its values files)
# into OUT_DIR, with the same stand-in secret files for both:
#   OUT_DIR/{cpu,gpu,multinode}.yaml            kubectl kustomize
#   OUT_DIR/helm-{cpu,gpu,multinode,tls}.yaml   deploy/helm/render.js
# Run from the workspace root (a test's runfiles); needs kubectl and node
# with NODE_PATH set.
set -euo pipefail
out="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A real copy: kustomize refuses files that resolve outside its root, and
# the secret files are not in the repository.
cp -rL deploy/k8s "$work/k8s"
mkdir -p "$work/k8s/base/secrets" "$work/values"
printf 'test-token\n' > "$work/k8s/base/secrets/token"
printf -- '-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n' \
  > "$work/k8s/base/secrets/tls.crt"
printf -- '-----BEGIN PRIVATE KEY-----\ntest\n-----END PRIVATE KEY-----\n' \
  > "$work/k8s/base/secrets/tls.key"

for overlay in cpu gpu multinode; do
  kubectl kustomize "$work/k8s/overlays/$overlay" > "$out/$overlay.yaml" \
    2> "$work/kustomize.err" || { cat "$work/kustomize.err" >&2; exit 1; }
done

chart=deploy/helm/tessera
render() {
  node deploy/helm/render.js "$chart" \
    --set-file auth.token="$work/k8s/base/secrets/token" \
    --set-file tls.crt="$work/k8s/base/secrets/tls.crt" \
    --set-file tls.key="$work/k8s/base/secrets/tls.key" "$@"
}
printf 'tls:\n  enabled: true\nextraFlags:\n  TESSERA_TLS_CLIENT_CA: /etc/tessera/secret/ca.crt\n' \
  > "$work/values/tls.yaml"
render > "$out/helm-cpu.yaml"
render -f "$chart/values-gpu.yaml" > "$out/helm-gpu.yaml"
render -f "$chart/values-gpu.yaml" -f "$chart/values-multinode.yaml" \
  > "$out/helm-multinode.yaml"
render -f "$work/values/tls.yaml" > "$out/helm-tls.yaml"
