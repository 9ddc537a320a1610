#!/usr/bin/env bash
# Install DeepSpeed (pinned) into the project's venv without replacing its torch.
#
#   adapters/install/deepspeed.sh [PYTHON]      # PYTHON defaults to .venv/bin/python
#
# Idempotent: a second run with the pinned version already present does nothing. A failed install prints why
# and exits 0 with a "DEEPSPEED-INSTALL-FAILED" marker, so the rest of `make setup` still completes; the adapter
# then reports itself unavailable with the reason (`compare list`).
# DeepSpeed JIT-compiles some ops on first use (shm comm ~35 s, cpu/fused Adam ~70 s each) into the JIT cache
# the adapter uses (${TORCH_EXTENSIONS_DIR:-<venv>/torch_extensions}, adapters/deepspeed.py). On a machine without
# CUDA the one every CPU launch needs, deepspeed_shm_comm, is built here, at set-up, so that the first comparison
# does not spend its first DeepSpeed launch compiling it; a build that fails here is retried by that launch.
set -uo pipefail

DEEPSPEED_VERSION="${DEEPSPEED_VERSION:-0.19.8}"
PY="${1:-.venv/bin/python}"

fail() {
    echo "DEEPSPEED-INSTALL-FAILED: $*" >&2
    echo "  the deepspeed adapter will report itself unavailable; retry with: $0 $PY" >&2
    exit 0
}

[ -x "$PY" ] || fail "no python at $PY (create the venv first: make setup)"

torch_version() { "$PY" -c "import torch; print(torch.__version__)" 2>/dev/null; }
TORCH_BEFORE="$(torch_version)" || true
[ -n "$TORCH_BEFORE" ] || fail "torch is not importable from $PY (install torch first)"

# The CPU launches' shm all-reduce op, JIT-built by DeepSpeed's own builder into the adapter's cache (a no-op once
# it is there). Not where CUDA is: DeepSpeed's CUDA accelerator does not use it.
prebuild_cpu_ops() {
    "$PY" -c "import torch, sys; sys.exit(0 if not torch.cuda.is_available() else 1)" 2>/dev/null || return 0
    local cache
    cache="${TORCH_EXTENSIONS_DIR:-$("$PY" -c "import sys; print(sys.prefix)")/torch_extensions}"
    # PATH: the venv's ninja, as the launches use; another ninja reads the build log as stale and rebuilds.
    if PATH="$(cd "$(dirname "$PY")" && pwd):$PATH" DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$cache" "$PY" -c \
        "from deepspeed.comm.torch import build_shm_op; import sys; sys.exit(0 if build_shm_op() is not None else 1)" \
        >/dev/null 2>&1; then
        echo "deepspeed_shm_comm built into $cache"
    else
        echo "warning: deepspeed_shm_comm could not be built now; the first DeepSpeed launch will build it" >&2
    fi
}

installed="$("$PY" -c "from importlib.metadata import version; print(version('deepspeed'))" 2>/dev/null || true)"
if [ "$installed" = "$DEEPSPEED_VERSION" ]; then
    echo "deepspeed $installed already installed (torch $TORCH_BEFORE)"
    prebuild_cpu_ops
    exit 0
fi

echo "installing deepspeed==$DEEPSPEED_VERSION, holding torch at $TORCH_BEFORE"
# The torch pin as a second requirement stops pip from resolving a different torch. DS_BUILD_OPS=0 (the
# default) builds no ops at install time: they are JIT-compiled on first use and cached.
if ! DS_BUILD_OPS=0 "$PY" -m pip install --quiet "deepspeed==$DEEPSPEED_VERSION" "torch==$TORCH_BEFORE"; then
    fail "pip install deepspeed==$DEEPSPEED_VERSION failed (see pip's output above)"
fi

TORCH_AFTER="$(torch_version)"
if [ "$TORCH_AFTER" != "$TORCH_BEFORE" ]; then
    # Loud: a silently swapped torch (e.g. a multi-GB CUDA build) would invalidate every comparison.
    echo "ERROR: installing deepspeed changed torch from $TORCH_BEFORE to ${TORCH_AFTER:-<not importable>}" >&2
    echo "  restore it with: $PY -m pip install --force-reinstall --no-deps torch==$TORCH_BEFORE" >&2
    exit 1
fi

# Import the package metadata and the launcher script, as the adapter's availability check does.
"$PY" -c "import deepspeed.git_version_info as g; print('deepspeed', g.version, 'installed; torch', '$TORCH_AFTER')" \
    || fail "deepspeed installed but does not import"
[ -x "$(dirname "$PY")/deepspeed" ] || echo "warning: the deepspeed launcher is not next to $PY" >&2
prebuild_cpu_ops
exit 0
