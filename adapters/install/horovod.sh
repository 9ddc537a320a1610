#!/usr/bin/env bash
# Install Horovod 0.28.1 (its last release) into the project's venv, built against the torch already there.
#
#   bash adapters/install/horovod.sh [PYTHON]      # PYTHON defaults to .venv/bin/python
#
# Why a build step of our own: the published sdist hard-codes CMAKE_CXX_STANDARD 14, and torch >= 2.1 headers
# refuse anything below C++17 (horovod issues 3996, 4014; the fix, PR 3998, was never released). We patch the
# two CMakeLists.txt files to 17 and build with --no-build-isolation so the extension links the venv's torch.
#
# Idempotent and cheap after the first time:
#   1. `import horovod.torch` works, with Gloo        -> nothing to do (a torch change breaks it: rebuild)
#   2. a cached wheel for this torch + python exists    -> pip install it (seconds)
#   3. otherwise build the wheel (~3.5 min on 2 cores), cache it, install it.
# A failed build never fails the set-up: its reason goes to $CACHE/horovod-build-failed.txt, which the
# horovod adapter reads to explain why its row is `unavailable`; everything else still installs.
# pip is never allowed to resolve dependencies here (--no-deps everywhere), so torch cannot be changed.
set -uo pipefail

PY=${1:-.venv/bin/python}
VERSION=0.28.1
CACHE=${COMPARE_WHEEL_CACHE:-$HOME/.cache/compare/wheels}
FAILED="$CACHE/horovod-build-failed.txt"
LOG="$CACHE/horovod-build.log"
# horovod's own install_requires (setup.py of 0.28.1), installed explicitly so pip resolves nothing else.
RUNTIME_DEPS=(cloudpickle psutil pyyaml packaging)

say() { echo "[horovod install] $*"; }

if [ ! -x "$PY" ]; then
    say "no python at $PY (run make setup first)" >&2
    exit 1
fi
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")   # absolute: we cd into a build directory below
mkdir -p "$CACHE"

# A horovod without Gloo or horovodrun (or one that no longer loads after a torch change) is reinstalled.
if "$PY" -c "import horovod.torch as hvd; assert hvd.gloo_built()" 2>/dev/null \
        && [ -x "$(dirname "$PY")/horovodrun" ]; then
    say "horovod.torch already imports ($("$PY" -c 'import horovod; print(horovod.__version__)')); nothing to do"
    rm -f "$FAILED"
    exit 0
fi

TORCH=$("$PY" -c "import torch; print(torch.__version__)") || { say "torch is not importable by $PY" >&2; exit 1; }
PYTAG=$("$PY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
# The wheel links against libtorch, so it is only valid for the exact torch build and python it was built with.
# A build with MPI (where an MPI compiler is installed, below) is cached apart from one without.
KEY_DIR="$CACHE/horovod-$VERSION/torch-$TORCH-$PYTAG$(command -v mpicxx > /dev/null && echo -mpi)"

pip_q() { "$PY" -m pip --disable-pip-version-check "$@"; }

install_wheel() {
    local wheel=$1
    pip_q install --quiet --no-deps "${RUNTIME_DEPS[@]}" || return 1
    pip_q install --quiet --no-deps --force-reinstall "$wheel" || return 1
    local after
    after=$("$PY" -c "import torch; print(torch.__version__)")
    if [ "$after" != "$TORCH" ]; then
        say "ERROR: torch changed from $TORCH to $after during the install" >&2
        return 1
    fi
    "$PY" -c "import horovod.torch as hvd; assert hvd.gloo_built(), 'gloo not built'" || return 1
}

fail() {
    # Record why, for `compare list` / the adapter's availability(), and let the rest of the set-up go on.
    # The first line is what `compare list` shows; the root cause is usually the log's first error line
    # (e.g. "#error C++17 or later compatible compiler is required"), not its last.
    local first=""
    [ -f "$LOG" ] && first=$(grep -m 1 -E "error|Error|ERROR" "$LOG" | sed 's/^[[:space:]]*//' | cut -c1-300)
    {
        echo "horovod $VERSION build failed for torch $TORCH ($PYTAG): $1${first:+; first error: $first}"
        echo "when: $(date -u +%Y-%m-%dT%H:%M:%SZ); python: $PY"
        if [ -f "$LOG" ]; then
            echo "--- first error lines of $LOG ---"
            grep -m 5 -E "error|Error|ERROR" "$LOG"
            echo "--- last lines ---"
            tail -n 12 "$LOG"
        fi
    } > "$FAILED"
    say "FAILED; the horovod row will be 'unavailable'. Reason (also in $FAILED):"
    cat "$FAILED"
    exit 0
}

WHEEL=$(ls "$KEY_DIR"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1)
if [ -n "$WHEEL" ]; then
    say "installing cached wheel $WHEEL"
    if install_wheel "$WHEEL"; then
        rm -f "$FAILED"
        say "ok (cached wheel)"
        exit 0
    fi
    say "cached wheel did not work; rebuilding"
    rm -f "$WHEEL"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say "building horovod $VERSION for torch $TORCH ($PYTAG); about 3.5 min on 2 cores; log: $LOG"
: > "$LOG"
start_s=$(date +%s)

pip_q download --quiet --no-deps --no-binary :all: "horovod==$VERSION" -d "$WORK" >> "$LOG" 2>&1 \
    || fail "could not download the horovod $VERSION sdist from PyPI"
tar -xzf "$WORK"/horovod-"$VERSION".tar.gz -C "$WORK" >> "$LOG" 2>&1 || fail "could not unpack the sdist"
SRC="$WORK/horovod-$VERSION"
for f in "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f" || fail "$f has no 'set(CMAKE_CXX_STANDARD 14)' to patch"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
done

# MPI is optional (gloo is what the adapter uses); build it in only where an MPI compiler is installed
# (Debian: apt-get install openmpi-bin libopenmpi-dev).
if command -v mpicxx > /dev/null; then MPI=(HOROVOD_WITH_MPI=1); else MPI=(HOROVOD_WITHOUT_MPI=1); fi
(
    cd "$SRC" &&
    env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 \
        HOROVOD_CPU_OPERATIONS=gloo "${MPI[@]}" MAKEFLAGS="${MAKEFLAGS:--j2}" \
        "$PY" -m pip --disable-pip-version-check wheel --no-build-isolation --no-deps -v . -w "$WORK/dist"
) >> "$LOG" 2>&1 || fail "pip wheel exited non-zero (compiler, cmake or torch headers; see the log)"

BUILT=$(ls "$WORK"/dist/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1)
[ -n "$BUILT" ] || fail "the build produced no wheel"
mkdir -p "$KEY_DIR"
cp "$BUILT" "$KEY_DIR/"
say "built in $(( $(date +%s) - start_s )) s; cached as $KEY_DIR/$(basename "$BUILT")"
install_wheel "$KEY_DIR/$(basename "$BUILT")" >> "$LOG" 2>&1 || fail "the built wheel does not import"
rm -f "$FAILED"
say "ok (built)"
