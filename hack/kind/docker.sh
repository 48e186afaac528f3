#!/usr/bin/env bash
# A Docker engine for the kind cluster (hack/kind/up.sh).
#
#   hack/kind/docker.sh up     use a working engine, else start a project-owned one
#   hack/kind/docker.sh down   stop the project-owned engine (if this checkout started it)
#   hack/kind/docker.sh env    print the DOCKER_HOST to use (empty: docker's default)
#
# "Working" means `docker info` answers and a --privileged container runs
# (kind's nodes are privileged). When the machine's engine fails that, or
# there is none, this installs Debian's docker.io (apt) if dockerd is missing
# and starts a dockerd owned by this checkout: its socket, data root, exec
# root and pid file live under .cache/docker, and its default runtime is
# hack/kind/runc-wrapper, given on the command line (the machine's
# /etc/docker is not read or changed). The wrapper drops CAP_SYS_RESOURCE,
# which this kind of VM cannot grant, from each container's capabilities.
#
# The test image is our own static pause binary (hack/build/tools.sh kind),
# imported without a registry.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

DOCKER_DIR="${CACHE_DIR}/docker"
OWN_SOCK="${DOCKER_DIR}/docker.sock"
OWN_HOST="unix://${OWN_SOCK}"
PIDFILE="${DOCKER_DIR}/dockerd.pid"
ENV_FILE="${DOCKER_DIR}/host"
PROBE_IMAGE="kps.local/probe:pause"

# privileged_ok: a privileged container runs on the engine DOCKER_HOST names.
privileged_ok() {
  docker info >/dev/null 2>&1 || return 1
  if ! docker image inspect "${PROBE_IMAGE}" >/dev/null 2>&1; then
    local tmp
    tmp="$(mktemp -d)"
    [[ -x "${TOOLS_BIN}/pause" ]] || die "no ${TOOLS_BIN#"${REPO_ROOT}/"}/pause for the test container: run hack/build/tools.sh kind first"
    install -m 0755 "${TOOLS_BIN}/pause" "${tmp}/pause"
    tar --numeric-owner -C "${tmp}" -c pause | docker import - "${PROBE_IMAGE}" >/dev/null
    rm -rf "${tmp}"
  fi
  docker run --rm --pull never --privileged --network none --entrypoint /pause "${PROBE_IMAGE}" -v >/dev/null 2>&1
}

own_running() {
  [[ -f "${PIDFILE}" ]] && kill -0 "$(<"${PIDFILE}")" 2>/dev/null
}

start_own() {
  if ! command -v dockerd >/dev/null || ! command -v runc >/dev/null || ! command -v jq >/dev/null; then
    log "installing Debian's docker.io, runc and jq (apt-get)"
    [[ "$(id -u)" == 0 ]] || die "installing docker.io needs root: run as root, or start a Docker engine that can run --privileged containers"
    apt-get update -qq >"${DOCKER_DIR}/apt.log" 2>&1 || { tail -n 20 "${DOCKER_DIR}/apt.log" >&2; die "apt-get update failed (log: ${DOCKER_DIR#"${REPO_ROOT}/"}/apt.log)"; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io runc containerd jq iptables \
      >>"${DOCKER_DIR}/apt.log" 2>&1 || { tail -n 20 "${DOCKER_DIR}/apt.log" >&2; die "apt-get install docker.io failed (log: ${DOCKER_DIR#"${REPO_ROOT}/"}/apt.log)"; }
  fi
  if own_running; then
    log "project-owned dockerd already running (pid $(<"${PIDFILE}"))"
  else
    rm -f "${OWN_SOCK}" "${PIDFILE}"
    mkdir -p "${DOCKER_DIR}/data" "${DOCKER_DIR}/exec"
    # An empty config of our own: the machine's /etc/docker is not read.
    printf '{}\n' >"${DOCKER_DIR}/daemon.json"
    log "starting a project-owned dockerd (socket ${OWN_SOCK#"${REPO_ROOT}/"}, log ${DOCKER_DIR#"${REPO_ROOT}/"}/dockerd.log)"
    # --bridge none: kind makes its own network; the default bridge would
    # clash with another engine's docker0.
    setsid dockerd \
      --host "${OWN_HOST}" \
      --data-root "${DOCKER_DIR}/data" \
      --exec-root "${DOCKER_DIR}/exec" \
      --pidfile "${PIDFILE}" \
      --bridge none \
      --add-runtime "kps-runc=${REPO_ROOT}/hack/kind/runc-wrapper" \
      --default-runtime kps-runc \
      --config-file "${DOCKER_DIR}/daemon.json" \
      </dev/null >"${DOCKER_DIR}/dockerd.log" 2>&1 &
    local deadline=$((SECONDS + 60))
    until DOCKER_HOST="${OWN_HOST}" docker info >/dev/null 2>&1; do
      if ((SECONDS > deadline)) || ! kill -0 $! 2>/dev/null; then
        tail -n 30 "${DOCKER_DIR}/dockerd.log" >&2
        die "the project-owned dockerd did not come up within 60s (log above: ${DOCKER_DIR#"${REPO_ROOT}/"}/dockerd.log)"
      fi
      sleep 0.5
    done
  fi
  export DOCKER_HOST="${OWN_HOST}"
  privileged_ok || die "a --privileged container fails even on the project-owned dockerd (see ${DOCKER_DIR#"${REPO_ROOT}/"}/dockerd.log)"
  printf '%s\n' "${OWN_HOST}" >"${ENV_FILE}"
}

up() {
  mkdir -p "${DOCKER_DIR}"
  if own_running; then
    start_own
  elif DOCKER_HOST="${DOCKER_HOST:-}" privileged_ok; then
    log "using the Docker engine at ${DOCKER_HOST:-the default socket}"
    printf '%s\n' "${DOCKER_HOST:-}" >"${ENV_FILE}"
  else
    log "no Docker engine that runs --privileged containers; starting one of our own"
    start_own
  fi
}

down() {
  if own_running; then
    local pid
    pid="$(<"${PIDFILE}")"
    log "stopping the project-owned dockerd (pid ${pid})"
    kill "${pid}"
    local deadline=$((SECONDS + 60))
    while kill -0 "${pid}" 2>/dev/null; do
      ((SECONDS < deadline)) || { kill -9 "${pid}" 2>/dev/null || true; break; }
      sleep 0.5
    done
    # dockerd's own containerd and shims are in its process group.
    pkill -f "${DOCKER_DIR}/exec" 2>/dev/null || true
  fi
  rm -f "${ENV_FILE}" "${PIDFILE}"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) [[ -f "${ENV_FILE}" ]] && cat "${ENV_FILE}" ;;
  *) die "usage: hack/kind/docker.sh up|down|env" ;;
esac
