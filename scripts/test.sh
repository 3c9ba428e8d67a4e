#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the tests need, then
# runs the whole suite. Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
began=$(date +%s)
# each step's line says when it began (seconds since the start): where a fresh machine's
# setup time goes
step() { echo "== [+$(( $(date +%s) - began ))s] $*"; }
# first: it also installs Open MPI, which mpi4py and Horovod need
step "starting the test Slurm cluster (scripts/slurm-cluster.sh: 2 nodes on this machine)"
bash scripts/slurm-cluster.sh start

# The real PBS server for tests/cluster/test_pbs_server.py: OpenPBS built from its source tarball
# once (cached), a server + 2 MoMs in network namespaces. Without the tarball (or with
# HPCTRAIN_TEST_PBS=0) those tests are skipped and the PBS tests run against the fakes
# (tests/support/fake_pbs); a server that does not start does not stop the suite either.
pbs_tarball="${HPCTRAIN_OPENPBS_TARBALL:-../shared/vendor/openpbs/openpbs-23.06.06.tar.gz}"
if [ "${HPCTRAIN_TEST_PBS:-1}" = 0 ]; then
  echo "== no real PBS server (HPCTRAIN_TEST_PBS=0): the PBS tests run against the fakes"
elif [ ! -f "$pbs_tarball" ]; then
  echo "== no real PBS server: no OpenPBS source at $pbs_tarball (set HPCTRAIN_OPENPBS_TARBALL);" \
       "the PBS tests run against the fakes"
else
  step "starting the test PBS server (scripts/pbs-server.sh: OpenPBS built once, then cached)"
  HPCTRAIN_OPENPBS_TARBALL="$(cd "$(dirname "$pbs_tarball")" && pwd)/$(basename "$pbs_tarball")" \
    bash scripts/pbs-server.sh start \
    || echo "== the PBS server did not start (above): the real-server PBS tests are skipped"
fi

step "the S3 server of the object-storage tests (scripts/s3-server.sh: moto, loopback)"
bash scripts/s3-server.sh start || echo "== the S3 server did not start (above): the S3 tests are skipped"

step "the multi-user tests' users (scripts/test-users.sh: alice, bob in her group, eve)"
bash scripts/test-users.sh

# A real container runtime for tests/cluster/test_slurm_container.py: Charliecloud and a
# minimal Debian image directory, built once with debootstrap and cached
step "the container test's runtime and image (scripts/container-image.sh: built once, then cached)"
bash scripts/container-image.sh >/dev/null \
  || echo "== the container image did not build (above): the container test will fail and say why"

step "installing hpctrain[torch,tensorflow,mpi,lightning,huggingface,deepspeed,lightgbm,dev] (editable)"
python3 -m pip install -q -e '.[torch,tensorflow,mpi,lightning,huggingface,deepspeed,lightgbm,dev]'
# XGBoost: its CPU-only build (the `xgboost` wheel also pulls CUDA's NCCL, ~300 MB, which
# CPU tests do not use); kept when some xgboost is installed already (one or the other)
python3 -c 'import xgboost' 2>/dev/null || python3 -m pip install -q xgboost-cpu

step "DeepSpeed's CPU comm op (JIT-compiled on first use, ~1 min on 2 cores; cached after)"
DS_ACCELERATOR=cpu python3 -c "from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder('ShareMemCommBuilder').load()" >/dev/null \
  || echo "== DeepSpeed's CPU comm op did not build (above): the DeepSpeed tests will show why"

step "Horovod for torch 2.x (scripts/install-horovod.sh: a wheel built once, then cached)"
bash scripts/install-horovod.sh

# Ray's released wheel, for tests/local/test_ray_examples.py: it ports Ray's example scripts
# read out of the wheel (not installed). Downloaded once, at the version the manifest pins.
ray_manifest=tests/support/ray_examples/MANIFEST.json
ray_version=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['wheel']['version'])" "$ray_manifest")
if ! ls .cache/ray-wheel/ray-"$ray_version"-*.whl >/dev/null 2>&1; then
  step "Ray $ray_version's wheel for the example-port test (into .cache/ray-wheel/, not installed)"
  python3 -m pip download -q "ray==$ray_version" --no-deps --only-binary=:all: -d .cache/ray-wheel \
    || echo "== Ray's wheel did not download (above): the Ray example tests will fail and say why"
fi

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
step "running the test suite"
set +e
# two pytest workers (pytest-xdist): the tests that use the Slurm cluster run one after
# another on one of them (tests/conftest.py groups them by their pytest.mark.cluster), the
# rest on the other; most of a cluster test's time is spent waiting for Slurm, not on the CPU.
# HPCTRAIN_TEST_WORKERS=0 runs everything in one process, in file order. --durations lists
# the 30 slowest tests at the end (what a CI run's time goes to).
workers="${HPCTRAIN_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then parallel=(); else parallel=(-n "$workers" --dist loadgroup); fi
python3 -m pytest -q -p no:cacheprovider --durations=30 "${parallel[@]}" "$@"
code=$?
set -e
step "suite ended (pytest exit code $code)"
if [ "$code" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$code"
