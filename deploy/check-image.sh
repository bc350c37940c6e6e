#!/usr/bin/env bash
# Checks the images deploy/build-image.sh made: each one's tesserad starts as
# the image's non-root user on a read-only root filesystem with every
# capability dropped, answers the tessera CLI from the same image (ping,
# devices) with a bearer token, and on SIGTERM drains and exits 0.
#
# Runs the images with podman where this machine can run a container;
# otherwise (or with --chroot) runs the cpu image's root filesystem with
# chroot in a private mount namespace, its root bound read-only.
#
# Usage: deploy/check-image.sh [--chroot] [OUT_DIR]   (as root)
set -euo pipefail

mode=podman
if [ "${1:-}" = "--chroot" ]; then
  mode=chroot
  shift
fi
out="$(cd "${1:-/var/tmp/tessera-image}" && pwd)"
uid=10001
work="$(mktemp -d)"
container=""
pulled=()
cleanup() {
  if [ -n "$container" ]; then podman rm -f "$container" >/dev/null 2>&1 || true; fi
  if [ "${#pulled[@]}" -gt 0 ]; then podman rmi -f "${pulled[@]}" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The token and the folder the daemon writes its port to, readable by the
# image's user.
install -d -m 0755 -o "$uid" -g "$uid" "$work/run"
install -d -m 0750 -o root -g "$uid" "$work/secret"
openssl rand -hex 16 > "$work/secret/token"
chgrp "$uid" "$work/secret/token"
chmod 0440 "$work/secret/token"

# Waits for the port file, then runs CLI commands; $1 runs a command in the
# image (podman exec or chroot).
wait_port() {
  for _ in $(seq 1 100); do
    [ -s "$work/run/port" ] && { cat "$work/run/port"; return 0; }
    sleep 0.1
  done
  return 1
}
cli_checks() {  # cli_checks IN_IMAGE PORT
  local in_image="$1" port="$2" devices
  $in_image /usr/bin/tessera --target="127.0.0.1:$port" \
    --token_file=/etc/tessera/secret/token ping > "$work/ping.txt" ||
    fail "tessera ping"
  echo "ping: $(tail -1 "$work/ping.txt")"
  devices="$($in_image /usr/bin/tessera --target="127.0.0.1:$port" \
    --token_file=/etc/tessera/secret/token devices)" || fail "tessera devices"
  echo "$devices" | grep -q cpu0 || fail "no cpu0 in: $devices"
  echo "devices: $(echo "$devices" | head -3 | tr '\n' ' ')"
  # Without the token (an empty --token_file overrides the environment's)
  # the daemon refuses the call.
  if $in_image /usr/bin/tessera --target="127.0.0.1:$port" --token_file= ping >/dev/null 2>&1; then
    fail "a call without the token was served"
  fi
}
check_drain_log() {  # check_drain_log LOG_FILE
  grep -q "draining" "$1" || fail "no drain in the log: $(tail -5 "$1")"
  grep -q "stopped" "$1" || fail "not stopped: $(tail -5 "$1")"
}

daemon_env=(
  TESSERA_LISTEN=127.0.0.1:0
  TESSERA_PORT_FILE=/run/tessera/port
  TESSERA_TOKEN_FILE=/etc/tessera/secret/token
  TESSERA_DEVICES=cpu
  TESSERA_THREADS=1
  TESSERA_DRAIN_TIMEOUT=5s
)

podman_check() {  # podman_check TAG
  local tag="$1" port code
  rm -f "$work/run/port"
  local image
  image="$(podman pull -q "oci:$out/oci:$tag")"
  pulled+=("$image")
  container="tessera-check-$tag-$$"
  # runc: crun refuses this machine's hybrid cgroup setup. The ulimits keep
  # the runtime from raising limits, which needs CAP_SYS_RESOURCE.
  podman "${runtime[@]}" run -d --name "$container" --network host \
    --read-only --tmpfs /tmp --tmpfs /var/cache/tessera \
    --cap-drop ALL --security-opt no-new-privileges \
    --ulimit "nofile=$(ulimit -n):$(ulimit -Hn)" --ulimit nproc=4096:4096 \
    -v "$work/run:/run/tessera" -v "$work/secret:/etc/tessera/secret:ro" \
    $(printf -- '-e %s ' "${daemon_env[@]}") "$image" >/dev/null
  port="$(wait_port)" || { podman logs "$container" >&2; fail "$tag: tesserad did not listen"; }
  echo "$tag: tesserad listens on 127.0.0.1:$port as uid $(stat -c %u "/proc/$(podman inspect --format '{{.State.Pid}}' "$container")")"
  cli_checks "podman exec $container" "$port"
  podman stop -t 30 "$container" >/dev/null
  code="$(podman inspect --format '{{.State.ExitCode}}' "$container")"
  podman logs "$container" > "$work/daemon.log" 2>&1
  [ "$code" = 0 ] || fail "$tag: exit status $code after SIGTERM: $(tail -5 "$work/daemon.log")"
  check_drain_log "$work/daemon.log"
  echo "$tag: drained on SIGTERM, exit status 0"
  podman rm "$container" >/dev/null
  container=""
}

chroot_check() {
  local rootfs="$out/rootfs-cpu" pid port code
  rm -f "$work/run/port"
  # A private mount namespace: the root filesystem bound read-only, with
  # the writable and secret places mounted as in the pod.
  cat > "$work/run.sh" <<EOF
set -e
mount --make-rprivate /
mkdir -p "$work/root"
mount --bind "$rootfs" "$work/root"
mount -o remount,bind,ro "$work/root"
mount -t tmpfs tmpfs "$work/root/tmp"
mount -t tmpfs -o uid=$uid tmpfs "$work/root/var/cache/tessera"
mount -t proc proc "$work/root/proc"
mount --bind "$work/run" "$work/root/run/tessera"
mount --bind -o ro "$work/secret" "$work/root/etc/tessera/secret"
cd /
exec env -i $(printf '%s ' "${daemon_env[@]}") \
  $(command -v chroot) --userspec=$uid:$uid "$work/root" /usr/bin/tesserad
EOF
  unshare -m bash "$work/run.sh" > "$work/daemon.log" 2>&1 &
  pid=$!
  port="$(wait_port)" || { cat "$work/daemon.log" >&2; fail "tesserad did not listen"; }
  echo "chroot: tesserad listens on 127.0.0.1:$port as uid $(stat -c %u "/proc/$pid")"
  # The CLI from the root filesystem, as its user.
  in_rootfs() {
    unshare -m bash -c "mount --bind -o ro '$work/secret' '$rootfs/etc/tessera/secret' && \
      exec chroot --userspec=$uid:$uid '$rootfs' \"\$@\"" _ "$@"
  }
  cli_checks in_rootfs "$port"
  kill -TERM "$pid"
  code=0
  wait "$pid" || code=$?
  [ "$code" = 0 ] || fail "exit status $code after SIGTERM: $(tail -5 "$work/daemon.log")"
  check_drain_log "$work/daemon.log"
  echo "chroot: drained on SIGTERM, exit status 0"
}

if [ "$mode" = podman ]; then
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends podman runc
  fi
  runtime=(--runtime runc)
  for tag in $(umoci ls --layout "$out/oci"); do
    podman_check "$tag"
  done
else
  chroot_check
fi
echo "image checks passed"
