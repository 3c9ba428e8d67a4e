#!/usr/bin/env bash
# The project's one test command (README, .ci/run): sets up what the tests need, then runs
# the whole suite. Safe to run again: every step is idempotent, and what it builds is cached.
#
# The suite runs in an environment of its own (scripts/test_env.py): a venv built from the
# versions tests/constraints.txt pins, whatever the user installed before or PyPI released
# since. The system's packages (Slurm, Open MPI, OpenPBS's build, Charliecloud) come from
# Debian. Every step either succeeds or stops this command with its reason printed.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
began=$(date +%s)
last=$began
timings=()
# each step's line says when it began (seconds since the start), and the summary at the end
# how long each took: where a fresh machine's set-up time goes
step() {
  local now; now=$(date +%s)
  [ -z "${current:-}" ] || timings+=("$(printf '%6ss  %s' $((now - last)) "$current")")
  last=$now current="$1"
  echo "== [+$((now - began))s] $1${2:+ ($2)}"
}
# stop with the step's name and its exit status; the step printed its own reason above
fail() { echo "error: set-up step failed: $current (exit $1; its reason above)" >&2; exit "$1"; }
need() { "$@" || fail $?; }
trap 'echo "error: scripts/test.sh failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# first: it also installs Open MPI, which mpi4py (in the test environment) and Horovod need
step "Slurm cluster" "scripts/slurm-cluster.sh: 2 nodes on this machine"
need bash scripts/slurm-cluster.sh start

step "test environment" "scripts/test_env.py: a venv from tests/constraints.txt, built once"
base_python="$(command -v python3)" || { echo "error: no python3 on PATH" >&2; exit 1; }
venv="$(need "$base_python" scripts/test_env.py ensure)"
# from here on, every `python3` (the set-up scripts, pytest, the ranks, the batch jobs) is the
# test environment's
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
unset PYTHONHOME
# the torch the test environment holds (one import): the docs' fresh venvs pin the same
torch_version="$(python3 -c 'import torch; print(torch.__version__)')"
export HPCTRAIN_TEST_TORCH="${HPCTRAIN_TEST_TORCH:-torch==${torch_version%%+*}}"
echo "   $venv/bin/python3 · torch $torch_version"

# The real PBS server for tests/cluster/test_pbs_server.py: OpenPBS built from its source tarball
# once (cached), a server + 2 MoMs in network namespaces. Without the tarball (or with
# HPCTRAIN_TEST_PBS=0) those tests are skipped and the PBS tests run against the fakes
# (tests/support/fake_pbs).
pbs_tarball="${HPCTRAIN_OPENPBS_TARBALL:-../shared/vendor/openpbs/openpbs-23.06.06.tar.gz}"
if [ "${HPCTRAIN_TEST_PBS:-1}" = 0 ]; then
  echo "== no real PBS server (HPCTRAIN_TEST_PBS=0): the PBS tests run against the fakes"
elif [ ! -f "$pbs_tarball" ]; then
  echo "== no real PBS server: no OpenPBS source at $pbs_tarball (set HPCTRAIN_OPENPBS_TARBALL);" \
       "the PBS tests run against the fakes"
else
  step "PBS server" "scripts/pbs-server.sh: OpenPBS built once, then cached"
  HPCTRAIN_OPENPBS_TARBALL="$(cd "$(dirname "$pbs_tarball")" && pwd)/$(basename "$pbs_tarball")" \
    need bash scripts/pbs-server.sh start
fi

step "S3 server" "scripts/s3-server.sh: moto, loopback"
need bash scripts/s3-server.sh start

step "test users" "scripts/test-users.sh: alice, bob in her group, eve"
need bash scripts/test-users.sh

# A real container runtime for tests/cluster/test_slurm_container.py: Charliecloud and a
# minimal Debian image directory, built once with debootstrap and cached
step "container runtime and image" "scripts/container-image.sh: built once, then cached"
image="$(need bash scripts/container-image.sh)"
echo "   $image"

step "DeepSpeed's CPU comm op" "JIT-compiled on first use, ~1 min on 2 cores; cached after"
need env DS_ACCELERATOR=cpu python3 -c "from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder('ShareMemCommBuilder').load()"

step "Horovod" "scripts/install-horovod.sh: a CPU wheel built once, then cached"
need bash scripts/install-horovod.sh

# Ray's released wheel, for tests/local/test_ray_examples.py: it ports Ray's example scripts
# read out of the wheel (not installed). Downloaded once, at the version the manifest pins.
ray_manifest=tests/support/ray_examples/MANIFEST.json
ray_version=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['wheel']['version'])" "$ray_manifest")
if ! ls .cache/ray-wheel/ray-"$ray_version"-*.whl >/dev/null 2>&1; then
  step "Ray's wheel" "Ray $ray_version, for the example-port test: into .cache/ray-wheel/, not installed"
  need python3 -m pip download -q "ray==$ray_version" --no-deps --only-binary=:all: -d .cache/ray-wheel
fi

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
step "test suite" "pytest"
trap - ERR
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
step "done"
echo "== wall time of each step:"
printf '%s\n' "${timings[@]}"
echo "== suite ended (pytest exit code $code) after $(( $(date +%s) - began )) s in all"
if [ "$code" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$code"
