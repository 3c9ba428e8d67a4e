#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the tests need, then
# runs the whole suite. Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# first: it also installs Open MPI, which mpi4py and Horovod need
echo "== starting the test Slurm cluster (scripts/slurm-cluster.sh: 2 nodes on this machine)"
bash scripts/slurm-cluster.sh start

echo "== installing hpctrain[torch,tensorflow,mpi,lightning,huggingface,deepspeed,dev] (editable)"
python3 -m pip install -q -e '.[torch,tensorflow,mpi,lightning,huggingface,deepspeed,dev]'

echo "== DeepSpeed's CPU comm op (JIT-compiled on first use, ~1 min on 2 cores; cached after)"
DS_ACCELERATOR=cpu python3 -c "from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder('ShareMemCommBuilder').load()" >/dev/null

echo "== Horovod for torch 2.x (scripts/install-horovod.sh: a wheel built once, then cached)"
bash scripts/install-horovod.sh

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
echo "== running the test suite"
set +e
# two pytest workers (pytest-xdist): the tests that use the Slurm cluster run one after
# another on one of them (tests/conftest.py groups them), the rest on the other; most of
# a cluster test's time is spent waiting for Slurm, not on the CPU.
# HPCTRAIN_TEST_WORKERS=0 runs everything in one process, in file order.
workers="${HPCTRAIN_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then parallel=(); else parallel=(-n "$workers" --dist loadgroup); fi
python3 -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$code"
