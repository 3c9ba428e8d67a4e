#!/usr/bin/env bash
# A real OpenPBS server on this one machine, for hpctrain's PBS tests: OpenPBS 23.06.06
# built from its source tarball, a server (+ scheduler, comm, datastore, MoM) on host
# pbsn1 and a second MoM on host pbsn2, each host a network namespace of its own.
#
#   scripts/pbs-server.sh build    build + install once (cached), about 4 min on 2 cores
#   scripts/pbs-server.sh start    build if needed, start (idempotent), wait for 2 free nodes
#   scripts/pbs-server.sh stop     stop the daemons (namespaces stay; `stop --purge` removes them)
#   scripts/pbs-server.sh status   daemons, nodes, queues; exit 0 only when both nodes are up
#   scripts/pbs-server.sh env      prints `export PATH=…` for the client commands
#
# Source: $HPCTRAIN_OPENPBS_TARBALL, default ../shared/vendor/openpbs/openpbs-23.06.06.tar.gz
# next to the repository; scripts/openpbs/python311-build-fix.patch (upstream commit
# 1d17427c0, after the tag) makes it compile against Python 3.11. The install prefix
# $HPCTRAIN_OPENPBS_PREFIX (default /var/cache/hpctrain/openpbs-23.06.06) is reused when it
# holds a complete install, like the Horovod wheel cache (scripts/install-horovod.sh).
# Needs root (apt-get, ip netns, daemons).
#
# Why namespaces: PBS refuses loopback addresses as host names, and this machine may only
# talk to loopback or to addresses inside namespaces it creates. pbsn1 (10.78.0.1) and
# pbsn2 (10.78.0.2) are joined by a veth pair; their /etc/hosts is /etc/netns/<ns>/hosts
# (bind-mounted by `ip netns exec`), so nothing outside the namespaces sees or reaches them
# and the test Slurm cluster (scripts/slurm-cluster.sh, 127.0.1.x) is untouched.
#
# State (PBS_HOME of each host, conf files, logs, client commands): $HPCTRAIN_PBS_DIR,
# default /var/spool/hpctrain-pbs (MoM refuses a PBS_HOME under a world-writable
# directory such as /var/tmp: "Security violation").
# Clients: $STATE/bin/{qsub,qstat,qdel,…} enter pbsn1's namespace from outside, or run
# PBS's own command inside either namespace (a job's resubmission). Jobs run as the
# submitting user (root too: acl_roots allows it), their PATH gets $STATE/bin through
# /etc/profile.d/hpctrain-pbs.sh, which acts only in a job of this server (PBS_CONF_FILE
# from MoM's pbs_environment), as /etc/profile.d/pbs.sh does on a PBS site.
# No /etc/pbs.conf is written (the tests take it to mean "this is a PBS host").
# Facts behind each step: shared/notes/pbs-facts.md, shared/notes/pbs-live-findings.md.
set -Eeuo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=23.06.06
tarball="${HPCTRAIN_OPENPBS_TARBALL:-$here/../../shared/vendor/openpbs/openpbs-$version.tar.gz}"
prefix="${HPCTRAIN_OPENPBS_PREFIX:-/var/cache/hpctrain/openpbs-$version}"
state="${HPCTRAIN_PBS_DIR:-/var/spool/hpctrain-pbs}"
ns1=hpctrain-pbsn1 ns2=hpctrain-pbsn2
h1=pbsn1 h2=pbsn2
ip1=10.78.0.1 ip2=10.78.0.2
conf1="$state/pbs-$h1.conf" conf2="$state/pbs-$h2.conf"
home1="$state/$h1" home2="$state/$h2"
profile_d=/etc/profile.d/hpctrain-pbs.sh
log="$state/logs"

say() { echo "[pbs-server] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
# no step fails without a word: the failing line and command
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# ------------------------------------------------------------------------------ build
# What OpenPBS's configure and make need (its INSTALL file), no GUI extras.
apt_pkgs="gcc g++ make libtool autoconf automake pkg-config perl libhwloc-dev libx11-dev
 libxt-dev libedit-dev libical-dev libncurses-dev postgresql-server-dev-all postgresql
 postgresql-contrib python3-dev tcl-dev tk-dev swig libexpat1-dev libssl-dev libxext-dev
 libxft-dev expat libedit2 tcl tk libical3 libcjson-dev iproute2 util-linux"

installed() { [ -x "$prefix/sbin/pbs_server.bin" ] && [ -x "$prefix/sbin/pbs_mom" ] \
  && [ -x "$prefix/bin/qsub" ] && [ -f "$prefix/.hpctrain-complete" ]; }

apt_deps() {
  local missing="" p
  for p in $apt_pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  say "apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null || die "apt-get update failed (above)"
  # shellcheck disable=SC2086
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing \
    >"$log/apt.log" 2>&1 || die "apt-get install failed: $log/apt.log"
}

cmd_build() {
  mkdir -p "$log"
  if installed; then say "OpenPBS $version already built in $prefix"; return 0; fi
  [ -f "$tarball" ] || die "no OpenPBS source tarball at $tarball (set HPCTRAIN_OPENPBS_TARBALL)"
  local t0=$SECONDS
  apt_deps
  local work; work="$(mktemp -d /var/tmp/hpctrain-openpbs-build.XXXXXX)"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  tar -xzf "$tarball" -C "$work"
  local src; src="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)"
  (cd "$src" && patch -p1 -s <"$here/openpbs/python311-build-fix.patch") || die "patch failed"
  say "autogen + configure (prefix $prefix)"
  (cd "$src" && ./autogen.sh >"$log/autogen.log" 2>&1) || die "autogen failed: $log/autogen.log"
  # Debian's python3 (with libpython3.11.so) for PBS's embedded hook interpreter, not a
  # pyenv/venv python that may come first on PATH
  (cd "$src" && PATH=/usr/bin:/bin:/usr/sbin:/sbin ./configure --prefix="$prefix" \
     --with-python=/usr >"$log/configure.log" 2>&1) || die "configure failed: $log/configure.log"
  say "make -j2 (log: $log/make.log)"
  (cd "$src" && nice -n 10 make -j2 >"$log/make.log" 2>&1) || die "make failed: $log/make.log"
  (cd "$src" && make install >"$log/make-install.log" 2>&1) || die "make install failed: $log/make-install.log"
  # make install drops system-wide files; keep the machine as it was
  rm -f /etc/profile.d/pbs.sh /etc/profile.d/pbs.csh /lib/systemd/system/pbs.service /etc/init.d/pbs
  [ -f /etc/pbs.conf ] && grep -q "PBS_EXEC=$prefix" /etc/pbs.conf && rm -f /etc/pbs.conf
  touch "$prefix/.hpctrain-complete"
  say "built and installed in $((SECONDS - t0)) s"
}

# ------------------------------------------------------------------------------ hosts
# Run a command on host 1 or 2: its network namespace, a UTS namespace with its hostname.
on_host() {
  local n=$1; shift
  local ns=$ns1 h=$h1 conf=$conf1
  if [ "$n" = 2 ]; then ns=$ns2; h=$h2; conf=$conf2; fi
  ip netns exec "$ns" unshare --uts -- env PBS_CONF_FILE="$conf" \
    PATH="$prefix/bin:$prefix/sbin:/usr/sbin:/usr/bin:/sbin:/bin" \
    sh -c 'hostname "$0"; exec "$@"' "$h" "$@"
}
qmgr_c() { on_host 1 "$prefix/bin/qmgr" -c "$1"; }

# Whether a command's output has a line matching $1 (output read whole first: grep -q
# closing the pipe early would fail the command under pipefail).
output_has() { local pattern=$1 out; shift; out="$("$@" 2>/dev/null || true)"; grep -qE -- "$pattern" <<<"$out"; }
ns_exists() { output_has "^$1( |\$)" ip netns list; }

setup_net() {
  ns_exists "$ns1" || ip netns add "$ns1"
  ns_exists "$ns2" || ip netns add "$ns2"
  ip -n "$ns1" link set lo up
  ip -n "$ns2" link set lo up
  ip -n "$ns1" link show hpbs1 >/dev/null 2>&1 \
    || ip -n "$ns1" link add hpbs1 type veth peer name hpbs2 netns "$ns2"
  output_has "inet $ip1/" ip -n "$ns1" addr show dev hpbs1 || ip -n "$ns1" addr add "$ip1/24" dev hpbs1
  output_has "inet $ip2/" ip -n "$ns2" addr show dev hpbs2 || ip -n "$ns2" addr add "$ip2/24" dev hpbs2
  ip -n "$ns1" link set hpbs1 up
  ip -n "$ns2" link set hpbs2 up
  local ns
  for ns in "$ns1" "$ns2"; do
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1\tlocalhost\n%s\t%s\n%s\t%s\n' "$ip1" "$h1" "$ip2" "$h2" >"/etc/netns/$ns/hosts"
    printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"/etc/netns/$ns/resolv.conf"
  done
}

write_conf() {
  cat >"$conf1" <<EOF
PBS_EXEC=$prefix
PBS_HOME=$home1
PBS_SERVER=$h1
PBS_START_SERVER=1
PBS_START_SCHED=1
PBS_START_COMM=1
PBS_START_MOM=1
PBS_CORE_LIMIT=unlimited
PBS_SCP=/usr/bin/scp
EOF
  cat >"$conf2" <<EOF
PBS_EXEC=$prefix
PBS_HOME=$home2
PBS_SERVER=$h1
PBS_START_SERVER=0
PBS_START_SCHED=0
PBS_START_COMM=0
PBS_START_MOM=1
PBS_LEAF_ROUTERS=$h1
PBS_CORE_LIMIT=unlimited
EOF
  chmod 644 "$conf1" "$conf2"
}

mom_config() {  # $1 PBS_HOME, $2 the job's TMPDIR parent, $3 its pbs.conf
  mkdir -p "$1/mom_priv" "$2"
  chmod 1777 "$2"
  # $usecp: output files are copied locally (one filesystem), never with scp
  printf '$clienthost %s\n$logevent 0x1ff\n$usecp *:/ /\n$tmpdir %s\n' "$h1" "$2" \
    >"$1/mom_priv/config"
  # every job of this MoM gets PBS_CONF_FILE: the profile.d file below keys on it
  if ! grep -q '^PBS_CONF_FILE=' "$1/pbs_environment" 2>/dev/null; then
    echo "PBS_CONF_FILE=$3" >>"$1/pbs_environment"
  fi
}

write_clients() {
  mkdir -p "$state/bin"
  local c
  for c in qsub qstat qdel qsig qrls qhold qalter qrerun qselect qmgr pbsnodes tracejob; do
    cat >"$state/bin/$c" <<EOF
#!/bin/sh
# $c of hpctrain's test PBS server (scripts/pbs-server.sh): inside one of its hosts (a
# job), PBS's own command; elsewhere, the same from inside host $h1's network namespace.
case "\$(ip netns identify 2>/dev/null)" in
  $ns1) exec env PBS_CONF_FILE="$conf1" "$prefix/bin/$c" "\$@" ;;
  $ns2) exec env PBS_CONF_FILE="$conf2" "$prefix/bin/$c" "\$@" ;;
esac
exec ip netns exec $ns1 unshare --uts -- env PBS_CONF_FILE="$conf1" \\
  sh -c 'hostname $h1; exec "\$@"' sh "$prefix/bin/$c" "\$@"
EOF
    chmod 755 "$state/bin/$c"
  done
  cat >"$profile_d" <<EOF
# hpctrain's test PBS server (scripts/pbs-server.sh): in a job of that server only, its
# client commands on PATH (what /etc/profile.d/pbs.sh does on a PBS site)
case "\${PBS_CONF_FILE:-}" in
  $state/*) PATH="$state/bin:\$PATH"; export PATH ;;
esac
EOF
}

wait_nodes_up() {
  local i up
  for i in $(seq 1 90); do
    up=$(on_host 1 "$prefix/bin/pbsnodes" -a 2>/dev/null | grep -cE "state = (free|job-busy)" || true)
    [ "$up" = 2 ] && return 0
    sleep 1
  done
  on_host 1 "$prefix/bin/pbsnodes" -a >&2 || true
  die "the 2 nodes are not up after 90 s"
}

daemons_up() {  # $1 host, $2 what pbs_init.d status must say
  local st; st="$(on_host "$1" "$prefix/libexec/pbs_init.d" status 2>/dev/null || true)"
  grep -q "$2" <<<"$st"
}

cmd_start() {
  installed || cmd_build
  local t0=$SECONDS
  mkdir -p "$log"
  setup_net
  write_conf
  write_clients
  [ -f "$home1/pbs_version" ] || on_host 1 "$prefix/libexec/pbs_habitat" >"$log/habitat-$h1.log" 2>&1 \
    || die "pbs_habitat $h1: $log/habitat-$h1.log"
  [ -f "$home2/pbs_version" ] || on_host 2 "$prefix/libexec/pbs_habitat" >"$log/habitat-$h2.log" 2>&1 \
    || die "pbs_habitat $h2: $log/habitat-$h2.log"
  mom_config "$home1" "$state/tmp-$h1" "$conf1"
  mom_config "$home2" "$state/tmp-$h2" "$conf2"
  if ! daemons_up 1 "pbs_server is pid"; then
    say "starting server, scheduler, comm and MoM on $h1"
    on_host 1 "$prefix/libexec/pbs_init.d" start >"$log/start-$h1.log" 2>&1 \
      || { cat "$log/start-$h1.log" >&2; die "start on $h1 failed"; }
  fi
  if ! daemons_up 2 "pbs_mom is pid"; then
    say "starting MoM on $h2"
    on_host 2 "$prefix/libexec/pbs_init.d" start >"$log/start-$h2.log" 2>&1 \
      || { cat "$log/start-$h2.log" >&2; die "start on $h2 failed"; }
  fi
  qmgr_c "create node $h1" 2>/dev/null || true
  qmgr_c "create node $h2" 2>/dev/null || true
  qmgr_c "create queue workq queue_type=execution" 2>/dev/null || true
  qmgr_c "set queue workq enabled=true"
  qmgr_c "set queue workq started=true"
  qmgr_c "set queue workq kill_delay=10"
  qmgr_c "set server default_queue=workq"
  qmgr_c "set server scheduling=true"
  # jobs of the tests run as root (their files are root's): allowed by acl_roots
  qmgr_c "set server acl_roots=root"
  # a job on pbsn2 resubmits itself: without flatuid the server refuses user@pbsn2
  qmgr_c "set server flatuid=true"
  # history on is what the tests start from (they switch it off to test that case)
  qmgr_c "set server job_history_enable=true"
  qmgr_c "set sched scheduler_iteration=10" 2>/dev/null || true
  wait_nodes_up
  say "started in $((SECONDS - t0)) s; clients: $state/bin"
}

cmd_stop() {
  if ns_exists "$ns2"; then
    on_host 2 "$prefix/libexec/pbs_init.d" stop >"$log/stop-$h2.log" 2>&1 || true
  fi
  if ns_exists "$ns1"; then
    on_host 1 "$prefix/libexec/pbs_init.d" stop >"$log/stop-$h1.log" 2>&1 || true
  fi
  say "stopped"
  if [ "${1:-}" = "--purge" ]; then
    ip netns del "$ns1" 2>/dev/null || true
    ip netns del "$ns2" 2>/dev/null || true
    rm -rf "/etc/netns/$ns1" "/etc/netns/$ns2" "$profile_d"
    say "namespaces removed"
  fi
}

cmd_status() {
  ns_exists "$ns1" || { echo "not started"; return 1; }
  installed || { echo "not built"; return 1; }
  echo "--- $h1"; on_host 1 "$prefix/libexec/pbs_init.d" status 2>&1 || true
  echo "--- $h2"; on_host 2 "$prefix/libexec/pbs_init.d" status 2>&1 || true
  echo "--- nodes"; on_host 1 "$prefix/bin/pbsnodes" -aSj 2>&1 || true
  echo "--- queues"; on_host 1 "$prefix/bin/qstat" -Q 2>&1 || true
  local up; up=$(on_host 1 "$prefix/bin/pbsnodes" -a 2>/dev/null | grep -cE "state = (free|job-busy)" || true)
  [ "$up" = 2 ]
}

case "${1:-}" in
  build) cmd_build ;;
  start) cmd_start ;;
  stop) shift; cmd_stop "$@" ;;
  status) cmd_status ;;
  env) echo "export PATH=$state/bin:\$PATH" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
