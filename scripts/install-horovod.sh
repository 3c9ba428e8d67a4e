#!/usr/bin/env bash
# Build and install Horovod 0.28.1 for PyTorch 2.x (CPU), with its Gloo and MPI controllers.
#
#   scripts/install-horovod.sh          build once (about 8 minutes on 2 cores), then install
#
# Why a script: Horovod's last release (0.28.1, PyPI sdist) forces C++14 in its CMake files
# and torch 2.x headers need C++17 (upstream issues #3996, #4014; fixed on Horovod's main
# branch, never released), so `pip install horovod` fails against torch 2.x. This script
# takes the same sdist, sets CMAKE_CXX_STANDARD to 17 in the two CMakeLists.txt that pin it,
# and builds a wheel against the torch that is installed. The wheel is kept in
# $HPCTRAIN_WHEEL_CACHE (default ~/.cache/hpctrain/wheels), named by the Horovod, torch and
# Python versions, so later runs (CI, a second venv) install it in seconds.
#
# Needs: torch installed, cmake, a C++17 compiler, and for the MPI controller an MPI with
# headers (Debian: openmpi-bin libopenmpi-dev, installed by scripts/slurm-cluster.sh).
# TensorFlow support is not built: Horovod is broken with TensorFlow >= 2.16 (upstream
# issues #4290, #4302); hpctrain's HorovodTrainer runs PyTorch training functions.
set -euo pipefail
version=0.28.1
py="${PYTHON:-python3}"
say() { echo "[install-horovod] $*"; }

if "$py" - <<EOF 2>/dev/null
import horovod, horovod.torch  # noqa: F401
import sys
sys.exit(0 if horovod.__version__ == "$version" else 1)
EOF
then
  say "horovod $version (torch) is already installed"; exit 0
fi

torch_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
py_tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
cache="${HPCTRAIN_WHEEL_CACHE:-$HOME/.cache/hpctrain/wheels}/horovod-$version-torch$torch_version-$py_tag"
mkdir -p "$cache"

if ! ls "$cache"/horovod-*.whl >/dev/null 2>&1; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  say "downloading the horovod $version sdist"
  "$py" -m pip download -q --no-deps --no-binary :all: -d "$work" "horovod==$version"
  tar -xzf "$work"/horovod-"$version".tar.gz -C "$work"
  src="$work/horovod-$version"
  # C++17, as torch 2.x needs (the sdist says 14 in these two files)
  sed -i -E 's/set\(CMAKE_CXX_STANDARD 1[14]\)/set(CMAKE_CXX_STANDARD 17)/' \
    "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 17' "$src/CMakeLists.txt" \
    || { say "could not set C++17 in $src/CMakeLists.txt"; exit 1; }
  say "building a wheel against torch $torch_version (about 8 minutes on 2 cores)"
  (cd "$src" && HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
     HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
     MAKEFLAGS="-j$(nproc)" "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$cache" .)
fi
say "installing $(basename "$(ls "$cache"/horovod-*.whl | head -1)")"
"$py" -m pip install -q --no-deps "$cache"/horovod-*.whl
# what horovod imports at run time (its own requirements, minus the frameworks)
"$py" -m pip install -q cloudpickle psutil pyyaml packaging
"$py" -c 'import horovod.torch as hvd; print("[install-horovod] horovod", __import__("horovod").__version__, "gloo:", hvd.gloo_built(), "mpi:", hvd.mpi_built())'
