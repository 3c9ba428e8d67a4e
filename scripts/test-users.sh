#!/usr/bin/env bash
# The extra users of the multi-user tests (tests/local/test_multiuser.py), made once: a user,
# a member of the user's project group, an outsider. Needs root (CI runs as root);
# without it the tests that need them are skipped. Idempotent.
#
#   hpct-alice  the user (groups: hpct-proj)
#   hpct-bob    a member of alice's project group (groups: hpct-proj)
#   hpct-eve    an outsider (no shared group)
#
# They run this machine's Python and the project's editable install: every directory
# on the way to the interpreter must be searchable by them (pyenv's lives under /root,
# 0700 on a fresh machine: it gets o+x, search only, no listing).
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "[test-users] not root: the multi-user tests will be skipped"
  exit 0
fi
getent group hpct-proj >/dev/null || groupadd hpct-proj
for u in hpct-alice hpct-bob hpct-eve; do
  id "$u" >/dev/null 2>&1 || useradd --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$u"
done
usermod -a -G hpct-proj hpct-alice
usermod -a -G hpct-proj hpct-bob
python="$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')"
dir="$(dirname "$python")"
while [ "$dir" != / ]; do
  chmod o+x "$dir"
  dir="$(dirname "$dir")"
done
# the checkout (the editable install points here) must be readable too
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$repo"
while [ "$dir" != / ]; do
  chmod o+x "$dir"
  dir="$(dirname "$dir")"
done
echo "[test-users] hpct-alice, hpct-bob (group hpct-proj) and hpct-eve are ready"
