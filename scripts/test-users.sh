#!/usr/bin/env bash
# The extra users of the multi-user tests (tests/local/test_multiuser.py), made once: a user,
# a member of the user's project group, an outsider. Needs root (CI runs as root);
# without it the tests that need them are skipped. Idempotent.
#
#   hpct-alice  the user (groups: hpct-proj)
#   hpct-bob    a member of alice's project group (groups: hpct-proj)
#   hpct-eve    an outsider (no shared group)
#
# They run the test environment's Python (scripts/test_env.py's venv, first on PATH) and the
# project's editable install: every directory on the way to the interpreter, the venv and
# the checkout must be searchable by them (pyenv's Python and the venv live under /root,
# 0700 on a fresh machine: it gets o+x, search only, no listing).
set -Eeuo pipefail
say() { echo "[test-users] $*"; }
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
if [ "$(id -u)" != 0 ]; then
  say "not root: the multi-user tests will be skipped"
  exit 0
fi
getent group hpct-proj >/dev/null || groupadd hpct-proj
for u in hpct-alice hpct-bob hpct-eve; do
  id "$u" >/dev/null 2>&1 || useradd --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$u"
done
usermod -a -G hpct-proj hpct-alice
usermod -a -G hpct-proj hpct-bob
searchable() {  # o+x on $1 and every directory above it
  local dir="$1"
  while [ "$dir" != / ]; do
    chmod o+x "$dir"
    dir="$(dirname "$dir")"
  done
}
# the interpreter, the venv it runs in (sys.prefix), and the checkout the editable install
# points at
searchable "$(python3 -c 'import os, sys; print(os.path.dirname(os.path.realpath(sys.executable)))')"
searchable "$(python3 -c 'import sys; print(sys.prefix)')"
searchable "$(cd "$(dirname "$0")/.." && pwd)"
say "hpct-alice, hpct-bob (group hpct-proj) and hpct-eve are ready"
