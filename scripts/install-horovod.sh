#!/usr/bin/env bash
# Build and install Horovod 0.28.1 for PyTorch 2.x (CPU), with its Gloo and MPI controllers.
#
#   scripts/install-horovod.sh          build once (about 8 minutes on 2 cores), then install
#
# Why a script: Horovod's last release (0.28.1, PyPI sdist) forces C++14 in its CMake files
# and torch 2.x headers need C++17, 2.14 and later C++20 (upstream issues #3996, #4014; fixed
# on Horovod's main branch, never released), so `pip install horovod` fails against torch 2.x.
# This script takes the same sdist, sets CMAKE_CXX_STANDARD in the two CMakeLists.txt that pin it,
# and builds a wheel against the torch that is installed. The wheel is kept in
# $HPCTRAIN_WHEEL_CACHE (default ~/.cache/hpctrain/wheels), named by the Horovod, torch and
# Python versions, so later runs (CI, a second venv) install it in seconds.
#
# CPU or GPU: a CPU build (Gloo and MPI controllers, CPU tensors) unless HOROVOD_GPU_OPERATIONS
# (Horovod's own variable, e.g. NCCL) asks for GPU operations. A CPU build works with a CUDA
# torch too (PyPI's default wheel): Horovod would otherwise compile its CUDA parts whenever torch
# has CUDA and a CUDA compiler is on PATH, and stop where the toolkit is incomplete (no
# cuda_runtime.h or libcudart); the script tells its CMake files to leave CUDA out. A GPU build
# checks the toolkit first and stops with the missing piece named.
#
# Needs: torch installed, cmake, a C++17 compiler, and for the MPI controller an MPI with
# headers (Debian: openmpi-bin libopenmpi-dev, installed by scripts/slurm-cluster.sh).
# TensorFlow support is not built: Horovod is broken with TensorFlow >= 2.16 (upstream
# issues #4290, #4302); hpctrain's HorovodTrainer runs PyTorch training functions.
set -Eeuo pipefail
version=0.28.1
py="${PYTHON:-python3}"
say() { echo "[install-horovod] $*"; }
die() { say "error: $*" >&2; exit 1; }
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

if "$py" - <<EOF 2>/dev/null
import horovod, horovod.torch  # noqa: F401
import sys
sys.exit(0 if horovod.__version__ == "$version" else 1)
EOF
then
  say "horovod $version (torch) is already installed"; exit 0
fi

command -v cmake >/dev/null || die "no cmake on PATH (Debian: apt-get install cmake)"
torch_version="$("$py" -c 'import torch; print(torch.__version__)')" \
  || die "torch does not import in $py: install torch first"
py_tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
  flavour=gpu
  # what Horovod's CMake needs of a CUDA toolkit (find_package(CUDAToolkit REQUIRED))
  cuda_home="$("$py" -c 'from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or "")')"
  [ -n "$cuda_home" ] || die "HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS but torch $torch_version finds no CUDA toolkit (set CUDA_HOME)"
  [ -f "$cuda_home/include/cuda_runtime.h" ] \
    || die "the CUDA toolkit at $cuda_home is incomplete: no include/cuda_runtime.h (a GPU build needs the whole toolkit; unset HOROVOD_GPU_OPERATIONS for a CPU build)"
  ls "$cuda_home"/lib64/libcudart.so* "$cuda_home"/lib/libcudart.so* >/dev/null 2>&1 \
    || die "the CUDA toolkit at $cuda_home is incomplete: no libcudart.so (a GPU build needs the whole toolkit; unset HOROVOD_GPU_OPERATIONS for a CPU build)"
else
  flavour=cpu
fi
# one wheel per Horovod, torch build (its local label: +cpu, +cu130), Python and flavour
cache="${HPCTRAIN_WHEEL_CACHE:-$HOME/.cache/hpctrain/wheels}/horovod-$version-torch${torch_version//+/-}-$py_tag-$flavour"
mkdir -p "$cache"

if ! ls "$cache"/horovod-*.whl >/dev/null 2>&1; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  say "downloading the horovod $version sdist"
  "$py" -m pip download -q --no-deps --no-binary :all: -d "$work" "horovod==$version"
  tar -xzf "$work"/horovod-"$version".tar.gz -C "$work"
  src="$work/horovod-$version"
  # the C++ standard torch's headers need (the sdist says 14 in these two files): C++17 for
  # torch 2.0-2.13, C++20 from 2.14 on ("C++20 or later compatible compiler is required")
  std="$("$py" -c 'import torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); print(20 if v >= (2, 14) else 17)')"
  sed -i -E "s/set\(CMAKE_CXX_STANDARD 1[14]\)/set(CMAKE_CXX_STANDARD $std)/" \
    "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  grep -q "CMAKE_CXX_STANDARD $std" "$src/CMakeLists.txt" \
    || die "could not set C++$std in $src/CMakeLists.txt"
  if [ "$flavour" = cpu ]; then
    # no CUDA language even if nvcc is on PATH, and torch's CUDA not followed into the build
    # (FindPytorch sets Pytorch_CUDA when torch has CUDA and a CUDA_HOME exists)
    sed -i -E 's/^if\(CMAKE_CUDA_COMPILER\)$/if(FALSE)  # a CPU build (install-horovod.sh)/' \
      "$src/CMakeLists.txt"
    sed -i -E 's/^(string\(TOUPPER "\$\{Pytorch_CUDA\}" Pytorch_CUDA\))$/\1\nset(Pytorch_CUDA FALSE)  # a CPU build (install-horovod.sh)/' \
      "$src/cmake/Modules/FindPytorch.cmake"
    grep -q '^if(FALSE)  # a CPU build' "$src/CMakeLists.txt" \
      && grep -q '^set(Pytorch_CUDA FALSE)' "$src/cmake/Modules/FindPytorch.cmake" \
      || die "could not leave CUDA out of Horovod $version's CMake files (their text changed?)"
  fi
  say "building a $flavour wheel against torch $torch_version (about 8 minutes on 2 cores)"
  (cd "$src" && HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
     HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
     MAKEFLAGS="-j$(nproc)" "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$cache" .)
fi
say "installing $(basename "$(ls "$cache"/horovod-*.whl | head -1)")"
"$py" -m pip install -q --no-deps "$cache"/horovod-*.whl
# what horovod imports at run time (its own requirements, minus the frameworks)
"$py" -m pip install -q cloudpickle psutil pyyaml packaging
"$py" -c 'import horovod.torch as hvd; print("[install-horovod] horovod", __import__("horovod").__version__, "gloo:", hvd.gloo_built(), "mpi:", hvd.mpi_built())'
