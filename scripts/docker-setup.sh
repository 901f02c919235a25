#!/usr/bin/env bash
# Make a Docker engine available on this machine (idempotent, no TTY needed).
#
#   scripts/docker-setup.sh            # install docker.io + debootstrap if missing, start dockerd
#   scripts/docker-setup.sh --check    # exit 0 if a daemon answers, 1 otherwise (changes nothing)
#
# What it does:
#   1. apt-get install docker.io (Debian's engine, 20.10 on bookworm) and debootstrap when missing.
#   2. If no daemon answers `docker info`, starts dockerd in the background, logging to
#      $THEMIS_DOCKERD_LOG (default /var/log/themis-dockerd.log). dockerd is started with
#      --bridge=none --iptables=false --ip6tables=false: no docker0 bridge and no iptables rules;
#      the mini-cluster's own bridge network (docker/minicluster.sh) needs no NAT or published
#      ports, and its containers resolve each other from /etc/hosts.
#      If that fails, it retries with the daemon's defaults.
#   3. Waits (up to $THEMIS_DOCKERD_WAIT seconds, default 60) until `docker info` works.
#
# Environment:
#   THEMIS_DOCKER_NO_INSTALL=1   never run apt-get (fail if docker/dockerd is missing)
#   THEMIS_DOCKERD_LOG           dockerd log file
#   THEMIS_DOCKERD_WAIT          seconds to wait for the daemon
set -euo pipefail

LOG=${THEMIS_DOCKERD_LOG:-/var/log/themis-dockerd.log}
WAIT=${THEMIS_DOCKERD_WAIT:-60}

say() { echo "[docker-setup] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# Prefer Debian's client (/usr/bin/docker) when present: it matches the 20.10 daemon. Any newer
# client on PATH negotiates the API version down, so either works.
DOCKER=docker
[[ -x /usr/bin/docker ]] && DOCKER=/usr/bin/docker

daemon_ok() { command -v "$DOCKER" >/dev/null 2>&1 && timeout 20 "$DOCKER" info >/dev/null 2>&1; }

if [[ ${1:-} == --check ]]; then
  daemon_ok && { say "docker daemon answers"; exit 0; }
  say "no docker daemon answers"; exit 1
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot install or start docker"
  SUDO="sudo -n"
fi

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || [[ -x /usr/sbin/dockerd ]] || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || need_pkgs+=(debootstrap)
if ((${#need_pkgs[@]})); then
  [[ ${THEMIS_DOCKER_NO_INSTALL:-0} == 1 ]] && die "missing ${need_pkgs[*]} and THEMIS_DOCKER_NO_INSTALL=1"
  command -v apt-get >/dev/null 2>&1 || die "missing ${need_pkgs[*]} and no apt-get on this machine"
  say "installing ${need_pkgs[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || die "apt-get update failed"
  # policy-rc.d in containers/sandboxes makes the postinst 'start' a no-op; that is fine.
  $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null \
    || die "apt-get install ${need_pkgs[*]} failed"
fi
# docker.io depends on containerd, runc, tini; iptables is only a Recommends.
DOCKERD=$(command -v dockerd || echo /usr/sbin/dockerd)
[[ -x $DOCKERD ]] || die "dockerd not found after install"

if daemon_ok; then
  say "docker daemon already running ($("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
  exit 0
fi

start_dockerd() {
  say "starting dockerd $* (log: $LOG)"
  $SUDO mkdir -p "$(dirname "$LOG")"
  # setsid + nohup: survive the calling shell/CI step; no TTY involved.
  $SUDO setsid nohup "$DOCKERD" "$@" >>"$LOG" 2>&1 </dev/null &
}

# A stale pid file from a dead daemon blocks a new one.
if [[ -f /var/run/docker.pid ]] && ! kill -0 "$(cat /var/run/docker.pid 2>/dev/null)" 2>/dev/null; then
  $SUDO rm -f /var/run/docker.pid
fi
if [[ -f /var/run/docker.pid ]]; then
  say "a dockerd (pid $(cat /var/run/docker.pid)) exists but does not answer yet; waiting for it"
else
  start_dockerd --bridge=none --iptables=false --ip6tables=false
fi

wait_daemon() {
  local t=$1 i
  for ((i = 0; i < t; i++)); do
    daemon_ok && return 0
    # The daemon died: no point waiting.
    if ((i > 3)) && ! pgrep -x dockerd >/dev/null 2>&1; then return 1; fi
    sleep 1
  done
  return 1
}

if ! wait_daemon "$WAIT"; then
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    say "dockerd with --bridge=none exited; last log lines:"
    tail -n 15 "$LOG" >&2 || true
    $SUDO rm -f /var/run/docker.pid
    start_dockerd
    wait_daemon "$WAIT" || { tail -n 30 "$LOG" >&2 || true; die "dockerd did not come up (see $LOG)"; }
  else
    tail -n 30 "$LOG" >&2 || true
    die "dockerd runs but 'docker info' fails after ${WAIT}s (see $LOG)"
  fi
fi
say "docker daemon ready: server $("$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null || echo '?')"
