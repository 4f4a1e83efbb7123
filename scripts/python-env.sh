# Sourced by the optional checks against the Python frameworks
# (check-exports.sh, compare-pytorch.sh), after they define die(): the
# pipescope binary they run and the virtual environment they run the tools in.

# Sets $pipescope to the binary PIPESCOPE names, or to build/cli/pipescope,
# built if missing; an absolute path either way.
find_pipescope() {
  if [ -n "${PIPESCOPE:-}" ]; then
    pipescope=$(command -v "$PIPESCOPE") || die "PIPESCOPE=$PIPESCOPE: no such program"
    [ -x "$pipescope" ] || die "PIPESCOPE=$PIPESCOPE is not executable"
  else
    pipescope=build/cli/pipescope
    if [ ! -x "$pipescope" ]; then
      echo "No $pipescope: building it with scripts/build.sh build pipescope" >&2
      scripts/build.sh build pipescope >&2 || die "building pipescope failed"
    fi
  fi
  pipescope=$(cd "$(dirname "$pipescope")" && pwd)/$(basename "$pipescope")
}

# Sets $venv to VENV, or to a fresh one in the folder $1 (thrown away with
# it), and creates the environment there with $python if it has none.
make_venv() {
  venv=${VENV:-$1/venv}
  if [ ! -x "$venv/bin/python" ]; then
    echo "Creating a virtual environment in $venv" >&2
    "$python" -m venv "$venv" || die "cannot create a virtual environment in $venv" \
      "(on Debian: apt-get install python3-venv)"
  fi
}
