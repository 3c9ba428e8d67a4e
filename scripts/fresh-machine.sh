#!/usr/bin/env bash
# Replays what a new user does on a new machine, in the README's order: a new venv without
# system site packages, the README's install command in it, the README's quick start; then
# checks that the test environment (scripts/test_env.py) is independent of that venv: it still
# holds every version tests/constraints.txt pins, whatever torch the install brought.
#
#   scripts/fresh-machine.sh [--source DIR] [--keep]
#
#   --source DIR  install from DIR (a copy of the checkout) instead of the checkout itself
#   --keep        keep the new venv and home directory (their path is printed)
#
# The install and run commands are read out of README.md's "Install and run" block, so this
# replays what the README says, not a copy of it. Pip's own settings apply as for any user
# (e.g. PIP_CONSTRAINT=file with torch==2.13.0 takes a CPU build that lies on disk; with
# nothing set, PyPI's default torch). Each step's wall time is printed at the end.
# The home directory is a new empty one (the quick start's runs go to ~/hpctrain_results),
# except for pip's cache (PIP_CACHE_DIR, default the caller's ~/.cache/pip).
set -Eeuo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source_dir="$here" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir="$(cd "$2" && pwd)"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
say() { echo "[fresh-machine] $*"; }
die() { say "error: $*" >&2; exit 1; }
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# README.md: the first ```bash block after "## Install and run"; its pip and hpctrain run lines
block="$(awk '/^## Install and run/ {s = 1; next} s && /^```bash/ {b = 1; next}
              b && /^```/ {exit} b {print}' "$here/README.md")"
install="$(grep -m1 -E '^pip install ' <<<"$block" | sed 's/[[:space:]]*#.*$//')" \
  || die "README.md's 'Install and run' block has no 'pip install' line"
run="$(grep -m1 -E '^hpctrain run ' <<<"$block" | sed 's/[[:space:]]*#.*$//')" \
  || die "README.md's 'Install and run' block has no 'hpctrain run' line"

work="$(mktemp -d /tmp/hpctrain-fresh-XXXXXX)"
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
venv="$work/venv" home="$work/home"
mkdir -p "$home"
timings=()
timed() {  # timed LABEL CMD...: run CMD, record its wall time under LABEL
  local label=$1 t0=$EPOCHREALTIME; shift
  "$@"
  timings+=("$(awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$label" \
               'BEGIN { printf "%7.1fs  %s", b - a, l }')")
}

# the machine's Python, not a venv's: a new user starts from it
base="$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
say "a new venv from $base at $venv (no system site packages)"
timed "new venv" "$base" -m venv "$venv"
# as the user has it: the venv activated, a new home, nothing of the caller's Python
user_env=(env -u PYTHONPATH -u PYTHONHOME -u HPCTRAIN_STORAGE_PATH -u HPCTRAIN_SITE
          -u XDG_CONFIG_HOME HOME="$home" VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
          PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}" PIP_DISABLE_PIP_VERSION_CHECK=1)
cd "$source_dir"
say "README's install, in $source_dir: $install"
timed "README's install" "${user_env[@]}" bash -c "$install -q" \
  || die "the README's install command failed (its output above)"
say "README's quick start: $run"
timed "README's quick start" "${user_env[@]}" bash -c "$run" >"$work/run.log" 2>&1 \
  || { cat "$work/run.log" >&2; die "the quick start failed (its output above)"; }
tail -3 "$work/run.log"
grep -q "FINISHED" "$work/run.log" \
  || { cat "$work/run.log" >&2; die "the quick start did not say FINISHED"; }
user_torch="$("$venv/bin/python" -c 'import torch; print(torch.__version__, torch.__file__)')"
say "the user's venv: torch $user_torch"
# the new venv holds only what the install brought: none of the test environment's packages
if "$venv/bin/python" -c 'import pytest' 2>/dev/null; then
  die "the new venv imports pytest: it sees packages it did not install"
fi

test_venv="${HPCTRAIN_TEST_VENV:-$HOME/.cache/hpctrain/test-venv}"
if [ ! -x "$test_venv/bin/python" ]; then
  say "no test environment yet: building it as scripts/test.sh does"
  timed "test environment" "$base" "$here/scripts/test_env.py" ensure >/dev/null \
    || die "the test environment did not build (above)"
fi
say "the test environment after the user's install:"
timed "test environment" "$base" "$here/scripts/test_env.py" check \
  || die "the test environment no longer holds its pinned versions (above)"
test_python="$test_venv/bin/python"
test_torch="$("$test_python" -c 'import torch; print(torch.__version__, torch.__file__)')"
say "the test environment: torch $test_torch"
[ "${test_torch#* }" != "${user_torch#* }" ] || die "the test environment imports the user's torch"
say "wall time of each step:"
printf '%s\n' "${timings[@]}"
[ "$keep" = 0 ] || say "kept: $work"
