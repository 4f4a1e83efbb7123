#!/usr/bin/env bash
# Installs the Debian 12 packages that PipeScope's build and tests need. Safe to
# run again: it does nothing when everything is there, and runs `apt-get update`
# at most once. Works as root or through sudo.
#
# The CUDA toolkit is not a Debian package and is found in /usr/local/cuda when
# present.
set -euo pipefail

packages=(
  build-essential
  cmake
  ninja-build
  pkg-config
  nlohmann-json3-dev  # scenario, plan and trace JSON
  libcli11-dev        # the command line
  libgtest-dev        # tests
  libgmock-dev        # GTest's CMake package refers to gmock
  libbenchmark-dev    # bench/
  libboost-graph-dev  # topologies and layer graphs
  libeigen3-dev       # the reference executor's tensors
  libopenmpi-dev      # the MPI runtime (--backend mpi)
  openmpi-bin         # mpirun, for it and its tests
  qt6-base-dev        # pipescope-gui: Widgets, Concurrent
  qt6-charts-dev      # its trade-off charts
  libqt6opengl6-dev   # Qt6Charts' CMake package needs Qt6OpenGL's
  qt6-svg-dev         # SVG export of the timeline
  libgl-dev           # Qt6Gui's CMake package looks for OpenGL
  fonts-dejavu-core   # text in offscreen renders (screenshots, GUI tests)
  clang               # scripts/fuzz.sh: the libFuzzer targets
  clang-format        # scripts/check-format.sh
  libclang-rt-dev     # libFuzzer and clang's sanitizer runtimes
  zlib1g-dev          # .gz outputs (compressed Chrome traces)
  python3-dev         # the Python module (python/), and its tests:
  python3-venv        #   scripts/python-venv.sh's environment
  python3-pytest
  python3-pandas      #   results as DataFrames
  python3-matplotlib  #   and as pictures
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
