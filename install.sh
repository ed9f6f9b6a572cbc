#!/usr/bin/env bash
# Install gpuslice for the python3 on PATH, write /etc/gpuslice/config.yaml if
# there is none, and generate the CDI spec when an NVIDIA driver is present.
#
#   ./install.sh               gpuslice itself
#   ./install.sh --with-tests  also what the test suite needs (Debian/Ubuntu:
#                              podman, runc, busybox, gcc, clang; pytest), installed
#                              editable so the tests run against this tree
# As root it runs as it is (a Debian container has no sudo); as another user
# it runs itself again through sudo.
set -euo pipefail
cd "$(dirname "$0")"

with_tests=0
for arg in "$@"; do
  case "$arg" in
    --with-tests) with_tests=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$arg' (use --with-tests or --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo -- "$PWD/install.sh" "$@"
  fi
  echo "install.sh: run as root: it writes /etc/gpuslice and /etc/cdi, and sudo is not installed (as root: ./install.sh $*)" >&2
  exit 2
fi

if [ "$with_tests" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Tests run real Podman 4.3 with runc (crun refuses the hybrid cgroup layout
  # of some hosts) on a busybox-static root file system; gcc builds the fake
  # driver; clang and libclang-rt-dev (libFuzzer, only a recommends of clang)
  # build the fuzz harnesses; Prometheus scrapes the exporter and tmux drives
  # `gpuslice top` in tests/test_exporter.py and test_top.py. gpuslice-nomad-device
  # needs gRPC, protobuf and msgpack; its tests build HashiCorp's go-plugin
  # client (tests/nomad_client) offline from Debian's Go packages, with protoc.
  # man-db and groff-base render the man pages in tests/test_manpages.py.
  # tests/test_slurm.py starts a real munged, slurmctld and slurmd (Debian 12:
  # Slurm 22.05) and builds the SPANK plugin against libslurm-dev's spank.h.
  # --no-install-recommends is enough: podman's
  # recommends serve rootless use and images, which the tests do not need.
  apt-get install -y -q --no-install-recommends \
    podman runc crun conmon containernetworking-plugins busybox-static uidmap \
    docker.io containerd \
    gcc make libc6-dev libsqlite3-dev libjansson-dev python3 python3-pip python3-dev clang libclang-rt-dev \
    ca-certificates util-linux mount procps debootstrap \
    git cpio build-essential debhelper dh-python python3-all python3-setuptools \
    pybuild-plugin-pyproject python3-yaml python3-click python3-cffi python3-tomlkit \
    python3-prometheus-client prometheus tmux \
    python3-grpcio python3-protobuf python3-msgpack protobuf-compiler golang-go \
    golang-github-hashicorp-go-plugin-dev golang-google-grpc-dev golang-goprotobuf-dev \
    golang-github-zclconf-go-cty-dev \
    rpm lintian rpmlint man-db groff-base \
    munge slurmctld slurmd slurm-client libslurm-dev </dev/null
fi

pip_args=(-q)
# Debian 12 and Ubuntu 24.04 mark the system Python as managed by apt; the
# distro packages (issue 7: packaging/) will be the clean way there; this is the quick one.
if python3 -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  pip_args+=(--break-system-packages)
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
if [ "$with_tests" = 1 ]; then
  python3 -m pip install "${pip_args[@]}" -e '.[test]' </dev/null
  # An editable install runs from this tree: build the shim here and put it
  # where the configuration's default shim_path looks.
  make -s -C native/shim
  install -D -m 0644 native/shim/build/libgpuslice.so /usr/lib/gpuslice/libgpuslice.so
  # An editable install leaves out data files: put the hook and the runtime
  # wrapper (built by setup.py) beside the `gpuslice` command, as `pip install .` does.
  scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
  install -m 0755 native/hook/build/gpuslice-hook native/hook/build/gpuslice-runtime "$scripts/"
else
  python3 -m pip install "${pip_args[@]}" . </dev/null  # builds and ships the shim
fi

# The Slurm SPANK plugin (docs/slurm.md), where Slurm's headers are
# (libslurm-dev): plugstack.conf names it by this path.
if [ -e /usr/include/slurm/spank.h ]; then
  make -s -C native/slurm
  install -D -m 0644 native/slurm/build/spank_gpuslice.so /usr/lib/gpuslice/spank_gpuslice.so
fi

# The man pages (man gpuslice, man gpuslice-resize, ...) where man looks for
# locally installed ones.
install -D -m 0644 -t /usr/local/share/man/man8 packaging/man/*.8

gpuslice=$(python3 -c 'import os, sysconfig; print(os.path.join(sysconfig.get_path("scripts"), "gpuslice"))')
mkdir -p /etc/gpuslice
if [ ! -e /etc/gpuslice/config.yaml ]; then
  "$gpuslice" config show > /etc/gpuslice/config.yaml
  echo "wrote /etc/gpuslice/config.yaml (defaults; see docs/configuration.md)"
fi
"$gpuslice" config check /etc/gpuslice/config.yaml

if python3 -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
  "$gpuslice" cdi generate
else
  echo "no NVIDIA driver found: run 'gpuslice cdi generate' once it is installed"
fi
echo "gpuslice installed: $gpuslice"
