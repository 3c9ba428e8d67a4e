#!/usr/bin/env bash
# A real container runtime and a small image for hpctrain's container tests
# (tests/cluster/test_slurm_container.py): Debian's Charliecloud (`ch-run`, unprivileged,
# user namespaces) and a minimal Debian image directory built with debootstrap. The image
# holds no Python: the tests bind the host's interpreter and the checkout into it.
#
#   scripts/container-image.sh          install if needed, build once (cached), print the path
#   scripts/container-image.sh path     print the image's path (built or not)
#   scripts/container-image.sh mirror [FILE...]
#                                       print the Debian mirror apt's sources name (or FILEs')
#
# Needs root (apt-get) and Debian's mirror (apt's configured sources). The image lives in
# $HPCTRAIN_CONTAINER_DIR (default /var/tmp/hpctrain-container); it is complete once
# etc/hpctrain-test-image exists in it (a half-built one is built again). Why Charliecloud:
# podman cannot start a container on this machine kind (crun: setrlimit ... Operation not
# permitted, cgroups in hybrid mode) and Apptainer is not packaged for Debian 12.
set -Eeuo pipefail
dir="${HPCTRAIN_CONTAINER_DIR:-/var/tmp/hpctrain-container}"
img="$dir/debian-bookworm"
marker="$img/etc/hpctrain-test-image"
say() { echo "[container-image] $*" >&2; }
die() { say "error: $*"; exit 1; }
trap 'say "error: failed at line $LINENO: $BASH_COMMAND"' ERR

# The first non-security mirror in apt's sources: deb822 files (*.sources, "URIs: URL ...")
# and one-line files (sources.list, *.list: "deb [options] URL suite ..."), whichever exist.
apt_mirror() {
  local files=() f
  if [ $# -gt 0 ]; then files=("$@"); else
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
             /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] && files+=("$f")
    done
  fi
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    /^[[:space:]]*URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /-security/) { print $i; exit } }
    /^[[:space:]]*deb[[:space:]]/ {
      i = 2
      if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if (i <= NF && $i !~ /-security/ && $(i + 1) !~ /-security/) { print $i; exit }
    }' "${files[@]}"
}

if [ "${1:-}" = path ]; then echo "$img"; exit 0; fi
if [ "${1:-}" = mirror ]; then shift; apt_mirror "$@"; exit 0; fi

if ! command -v ch-run >/dev/null || ! command -v debootstrap >/dev/null; then
  say "installing charliecloud-runtime and debootstrap (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq \
    || die "apt-get update failed (above)"
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq charliecloud-runtime debootstrap >/dev/null \
    || die "apt-get install charliecloud-runtime debootstrap failed (above)"
fi

if [ ! -f "$marker" ]; then
  say "building $img (debootstrap --variant=minbase, ~2 min, once)"
  mkdir -p "$dir"
  rm -rf "$img.partial"
  suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
  # the shared libraries the host's Python and its extension modules load (the
  # interpreter itself is bound in from the host)
  libs=libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libexpat1
  libs=$libs,libtirpc3,libcrypt1,zlib1g,libstdc++6,libgomp1,libgssapi-krb5-2,libuuid1
  mirror="$(apt_mirror)"
  [ -n "$mirror" ] || die "no Debian mirror in apt's sources (/etc/apt/sources.list, sources.list.d/*.list or *.sources): debootstrap needs one"
  debootstrap --variant=minbase --include="$libs" "$suite" "$img.partial" \
    "$mirror" >"$dir/debootstrap.log" 2>&1 \
    || { tail -5 "$dir/debootstrap.log" >&2; die "debootstrap from $mirror failed, see $dir/debootstrap.log (its end above)"; }
  rm -rf "$img"
  mv "$img.partial" "$img"
  echo "hpctrain test image ($suite, minbase)" >"$marker"
fi
# ch-run 0.31 binds directories only, and the test nodes' names live in the host's
# /etc/hosts (scripts/slurm-cluster.sh): the image gets a copy, refreshed each time
cp /etc/hosts "$img/etc/hosts"
echo "$img"
