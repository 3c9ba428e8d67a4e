#!/usr/bin/env bash
# A real S3 server for the object-storage tests (tests/support/s3.py): moto's standalone
# server (moto_server, from the dev extra's moto[server], run by tests/support/s3_server.py
# with one fix), speaking the S3 HTTP protocol
# on a loopback port. Its data live in memory; each test makes its own bucket.
#
#   scripts/s3-server.sh start    start (idempotent), wait until it answers
#   scripts/s3-server.sh stop
#   scripts/s3-server.sh status
#   scripts/s3-server.sh env      the environment a client needs (eval "$(... env)")
#
# Port: $HPCTRAIN_S3_PORT (default 17481). State (pid, log): $HPCTRAIN_S3_DIR
# (default /var/tmp/hpctrain-s3). Without moto_server it says so and exits 0: the tests
# that need it are skipped, saying why.
set -Eeuo pipefail
port="${HPCTRAIN_S3_PORT:-17481}"
dir="${HPCTRAIN_S3_DIR:-/var/tmp/hpctrain-s3}"
url="http://127.0.0.1:$port"
say() { echo "[s3-server] $*"; }
# no step fails without a word: the failing line and command
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

answers() { python3 - "$url" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=2)
except Exception:
    sys.exit(1)
PY
}

cmd_start() {
  if answers; then say "already answering at $url"; return; fi
  if ! python3 -c "import moto.server, flask" 2>/dev/null; then
    say "error: moto's server does not import in $(command -v python3) (pip install 'moto[server]'; scripts/test.sh's environment has it)" >&2
    exit 1
  fi
  mkdir -p "$dir"
  cd "$(dirname "$0")/.."
  setsid nohup python3 -m tests.support.s3_server "$port" >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  for _ in $(seq 1 100); do
    if answers; then say "answering at $url (pid $(cat "$dir/pid"))"; return; fi
    sleep 0.2
  done
  say "moto_server did not answer at $url; its log:"; tail -20 "$dir/server.log"; exit 1
}

cmd_stop() {
  if [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null; then say "stopped"; fi
  rm -f "$dir/pid"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) if answers; then say "answering at $url"; else say "not running"; exit 1; fi ;;
  env) echo "export AWS_ENDPOINT_URL=$url AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
