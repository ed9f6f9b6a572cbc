#!/usr/bin/env bash
# Install gpuslice for the python3 on PATH, write /etc/gpuslice/config.yaml if
# there is none, and generate the CDI spec when an NVIDIA driver is present.
#
#   ./install.sh               gpuslice itself
#   ./install.sh --with-tests  also what the test suite needs (Debian/Ubuntu:
#                              podman, runc, busybox, gcc, clang; pytest), installed
#                              editable so the tests run against this tree
#   ./install.sh --uninstall   the way back: gpuslice's programs, shim, man pages
#                              and CDI spec go; the configuration and the
#                              accountant stay (as a package's removal)
#   ./install.sh --purge       --uninstall, then the configuration, the
#                              accountant and gpuslice's runtime folders too
# As root it runs as it is (a Debian container has no sudo); as another user
# it runs itself again through sudo.
set -euo pipefail
cd "$(dirname "$0")"

with_tests=0
remove=""
for arg in "$@"; do
  case "$arg" in
    --with-tests) with_tests=1 ;;
    --uninstall) remove=uninstall ;;
    --purge) remove=purge ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$arg' (use --with-tests, --uninstall, --purge or --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$remove" ] && [ "$with_tests" = 1 ]; then
  echo "install.sh: --with-tests installs and --$remove removes: give one of them" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo -- "$PWD/install.sh" "$@"
  fi
  echo "install.sh: run as root: it writes /etc/gpuslice and /etc/cdi, and sudo is not installed (as root: ./install.sh $*)" >&2
  exit 2
fi

pip_args=(-q)
# Debian 12 and Ubuntu 24.04 mark the system Python as managed by apt; the
# distro packages (packaging/) are the clean way there; this is the quick one.
if python3 -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  pip_args+=(--break-system-packages)
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
gpuslice="$scripts/gpuslice"

if [ -n "$remove" ]; then
  # What an install made, in the reverse order; the same as the packages'
  # removal and purge (docs/packages.md), for an install from a checkout.
  spec_dir=/etc/cdi
  state_dirs=(/var/lib/gpuslice /run/gpuslice)
  if [ -x "$gpuslice" ]; then
    # Containers that hold slices keep running, but their poststop hooks
    # would name a program that is gone: their slices stay booked.
    held=$("$gpuslice" status --json </dev/null 2>/dev/null | python3 -c 'import json, sys; print(len({k["id"] for c in json.load(sys.stdin)["cards"] for k in c["containers"]}))' 2>/dev/null || echo 0)
    if [ "$held" != 0 ]; then
      echo "install.sh: $held container(s) hold slices (gpuslice status): stop them first, so that their slices are given back; nothing removed" >&2
      exit 2
    fi
    read -r spec_dir database state_dir < <("$gpuslice" config show --format json </dev/null | python3 -c 'import json, sys; c = json.load(sys.stdin); print(c["spec_dir"], c["database"], c["state_dir"])') || true
    state_dirs=("$(dirname "${database:-/var/lib/gpuslice/state.db}")" "${state_dir:-/run/gpuslice}")
  fi
  for dir in "$spec_dir" /etc/cdi; do
    rm -f "$dir/gpuslice.yaml" "$dir/gpuslice.json"
  done
  python3 -m pip uninstall "${pip_args[@]}" -y gpuslice </dev/null || true
  rm -f "$scripts/gpuslice-hook" "$scripts/gpuslice-runtime"  # --with-tests copies them there
  rm -f /usr/lib/gpuslice/libgpuslice.so /usr/lib/gpuslice/spank_gpuslice.so
  rmdir /usr/lib/gpuslice 2>/dev/null || true
  for page in packaging/man/*.8; do
    rm -f "/usr/local/share/man/man8/$(basename "$page")"
  done
  if [ "$remove" = purge ]; then
    for dir in /etc/gpuslice "${state_dirs[@]}" /var/cache/gpuslice; do
      # Emptied, then removed: a folder that is a mount point stays, empty.
      if [ -d "$dir" ]; then find "$dir" -mindepth 1 -delete; rmdir "$dir" 2>/dev/null || true; fi
    done
    echo "gpuslice purged: its programs, configuration, accountant and runtime folders are gone"
  else
    echo "gpuslice uninstalled; /etc/gpuslice and the accountant (${state_dirs[0]}) stay: ./install.sh --purge removes them"
  fi
  echo "engine configurations that gpuslice setup changed keep the change: each has its old text in <file>.gpuslice-backup"
  exit 0
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

if [ "$with_tests" = 1 ]; then
  python3 -m pip install "${pip_args[@]}" -e '.[test]' </dev/null
  # An editable install runs from this tree: build the shim here and put it
  # where the configuration's default shim_path looks.
  make -s -C native/shim
  install -D -m 0644 native/shim/build/libgpuslice.so /usr/lib/gpuslice/libgpuslice.so
  # An editable install leaves out data files: put the hook and the runtime
  # wrapper (built by setup.py) beside the `gpuslice` command, as `pip install .` does.
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

mkdir -p /etc/gpuslice
if [ ! -e /etc/gpuslice/config.yaml ]; then
  "$gpuslice" config show > /etc/gpuslice/config.yaml
  echo "wrote /etc/gpuslice/config.yaml (defaults; see docs/configuration.md)"
fi
"$gpuslice" config check /etc/gpuslice/config.yaml

echo "gpuslice installed: $gpuslice"
if python3 -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
  "$gpuslice" cdi generate
  echo "the devices a container can ask for (podman run --device gpuslice.io/gpu=NAME ...):"
  "$gpuslice" cdi list
elif [ "$with_tests" = 1 ]; then
  # No card here: show the product at work on the test suite's simulated one.
  echo "no NVIDIA driver found: run 'gpuslice cdi generate' once it is installed; meanwhile, on a simulated card:"
  echo
  python3 tests/demo.py </dev/null || echo "install.sh: the demo failed (above); the install itself is done" >&2
else
  echo "no NVIDIA driver found: run 'gpuslice cdi generate' once it is installed"
fi
