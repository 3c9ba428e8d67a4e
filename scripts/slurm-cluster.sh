#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for hpctrain's tests and for trying job
# scripts on a laptop: Debian's slurm-wlm, one slurmctld and N slurmd daemons, each
# playing a node (n1, n2, …), each node name resolving to its own 127.0.1.x address.
#
#   scripts/slurm-cluster.sh start [N]   install if needed, start (idempotent), wait for idle
#   scripts/slurm-cluster.sh stop
#   scripts/slurm-cluster.sh status
#
# Needs root (apt-get, /etc/slurm, /etc/hosts). State lives in $HPCTRAIN_SLURM_DIR
# (default /var/tmp/hpctrain-slurm). Facts behind each step: shared/notes/slurm-on-one-machine.md.
set -Eeuo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${HPCTRAIN_SLURM_DIR:-/var/tmp/hpctrain-slurm}"
conf=/etc/slurm/slurm.conf
marker="# hpctrain's test cluster"
nodes="${2:-${HPCTRAIN_SLURM_NODES:-2}}"
ctld_port=16817
base_port=17001

say() { echo "[slurm-cluster] $*"; }
# no step fails without a word: the failing line and command
trap 'say "error: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

install() {
  if command -v sbatch >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
      && command -v mpirun >/dev/null; then
    return
  fi
  say "installing slurm-wlm, munge and Open MPI (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq \
    || { say "error: apt-get update failed (above)" >&2; exit 1; }
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq slurm-wlm munge openmpi-bin \
    libopenmpi-dev >/dev/null \
    || { say "error: apt-get install slurm-wlm munge openmpi-bin libopenmpi-dev failed (above)" >&2; exit 1; }
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  su -s /bin/sh munge -c munged
  for _ in $(seq 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  say "munged did not start"; exit 1
}

hosts_entries() {
  local i
  for i in $(seq 1 "$nodes"); do
    if ! grep -qE "^127\.0\.1\.$i[[:space:]]+n$i\$" /etc/hosts; then
      echo "127.0.1.$i n$i" >> /etc/hosts
    fi
  done
}

write_conf() {
  if [ -f "$conf" ] && ! grep -q "$marker" "$conf"; then
    say "$conf exists and is not ours: refusing to overwrite it"; exit 1
  fi
  mkdir -p /etc/slurm "$dir/state"
  local i last=$((base_port + nodes - 1)) cpus cores
  # 8 CPUs per node whatever the machine has (SlurmdParameters=config_overrides): two
  # 2-node x 2-task test jobs then share the nodes at once, as the tests require.
  cores=$(getconf _NPROCESSORS_ONLN)  # not nproc: it obeys OMP_NUM_THREADS
  cpus=$(( cores > 8 ? cores : 8 ))
  for i in $(seq 1 "$nodes"); do mkdir -p "$dir/tmp-n$i" "$dir/slurmd-n$i"; done
  sed -e "s|@HOST@|$(hostname)|g" -e "s|@DIR@|$dir|g" -e "s|@NODES@|$nodes|g" \
      -e "s|@NODELIST@|n[1-$nodes]|g" -e "s|@PORTS@|$base_port-$last|g" \
      -e "s|@CPUS@|$cpus|g" -e "s|@CTLD_PORT@|$ctld_port|g" \
      "$here/slurm/slurm.conf.template" > "$conf.new"
  # NodeAddr per node, so that each name is its own address
  local addrs=""
  for i in $(seq 1 "$nodes"); do addrs="${addrs:+$addrs,}127.0.1.$i"; done
  sed -i "s|^NodeName=\(.*\) NodeHostname=|NodeName=\1 NodeAddr=$addrs NodeHostname=|" "$conf.new"
  if ! cmp -s "$conf.new" "$conf" 2>/dev/null; then
    mv "$conf.new" "$conf"
    return 0   # changed: daemons must (re)start
  fi
  rm -f "$conf.new"
  return 1
}

running() { pgrep -f "$1" >/dev/null 2>&1; }

start_daemons() {
  local changed=$1 i
  if [ "$changed" = yes ]; then stop_daemons; fi
  running "^slurmctld" || slurmctld
  for i in $(seq 1 "$nodes"); do
    running "^slurmd -N n$i\$" || slurmd -N "n$i"
  done
}

wait_idle() {
  local t
  for t in $(seq 120); do
    local states
    states=$(sinfo -h -N -o "%N %T" 2>/dev/null || true)
    if [ -n "$states" ] && ! echo "$states" | grep -vqE " (idle|mixed|allocated)$"; then
      say "up: $(echo "$states" | tr '\n' ' ')"
      return 0
    fi
    if echo "$states" | grep -qE " (down|drained|draining)"; then
      scontrol update nodename="n[1-$nodes]" state=resume 2>/dev/null || true
    fi
    sleep 0.5
  done
  say "nodes did not become idle:"; sinfo -N || true
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd-n1.log 2>/dev/null || true
  exit 1
}

stop_daemons() {
  pkill -f "^slurmd -N n" 2>/dev/null || true
  pkill -f "^slurmctld" 2>/dev/null || true
  for _ in $(seq 50); do
    running "^slurmctld" || running "^slurmd -N n" || return 0
    sleep 0.1
  done
}

case "${1:-start}" in
  start)
    install
    start_munge
    hosts_entries
    if write_conf; then changed=yes; else changed=no; fi
    start_daemons "$changed"
    wait_idle
    ;;
  stop) stop_daemons; say "stopped" ;;
  status) sinfo -N; squeue ;;
  *) echo "usage: $0 start [N] | stop | status" >&2; exit 2 ;;
esac
