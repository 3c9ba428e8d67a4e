#!/usr/bin/env bash
# hpctrain on a GPU: NCCL process groups, per-rank device binding, DDP with a crash and a
# resume, FSDP with a DCP checkpoint, DeepSpeed ZeRO-2 fp16, an asynchronous checkpoint of
# CUDA tensors, a hang inside a collective (detected by the watchdog, stacks written, the
# run resumed), and bench/bench_core.py against torchrun on the GPU; one table at the end
# (the checks themselves: scripts/gpu_check.py). At most 8 minutes.
#
#   bash scripts/gpu-check.sh                 # on a machine with a GPU
#   bash scripts/gpu-check.sh --cpu           # the same code paths on CPU ranks (a dry run)
#   bash scripts/gpu-check.sh --fetch-wheels  # on a machine with network: put the packages a
#                                             # bare CUDA image lacks into .whl/ (see below)
#
# Without a GPU (torch missing, or torch.cuda.is_available() false) it says so and exits 0.
# The table is printed and written to $OUT (or ./gpu-check-out) as gpu-check.md/.json, with
# one log per check. Exit status: 1 when a check failed.
#
# A GPU machine with no network and no hpctrain installed: run --fetch-wheels where pip can
# download (GPU_CHECK_PYTHON_VERSION, default 3.12, must be the GPU machine's Python), carry
# .whl/ along with the checkout; this script installs them into a private folder first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=.whl

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    pyver=${GPU_CHECK_PYTHON_VERSION:-3.12}
    mkdir -p "$WHEELS"
    # hpctrain's own needs that a CUDA/PyTorch image rarely has, and DeepSpeed's
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHEELS" python-hostlist tomli-w submitit pydantic pydantic-core annotated-types \
        typing-inspection hjson
    # DeepSpeed is published as a source package only: build its pure-Python wheel (its ops
    # are compiled on first use, where they are used)
    DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" deepspeed
    ls "$WHEELS"
    exit 0
fi

args=()
if [[ "${1:-}" == "--cpu" ]]; then
    args+=(--cpu)
elif ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: no GPU here (torch is missing or torch.cuda.is_available() is False): nothing to check"
    exit 0
fi
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    site=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-gpu-site.XXXXXX")
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl; then
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "gpu-check: the wheels in $WHEELS/ do not install here (another Python?); going on without them" >&2
    fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
out=${OUT:-gpu-check-out}
export PYTHONUNBUFFERED=1
timeout 500 "$PY" scripts/gpu_check.py --out "$out" "${args[@]}"
