#!/usr/bin/env bash
# Assembles the test guest (test/guest) from Debian packages only,
# once, into the tool cache ($TENURE_CACHE_DIR, default ~/.cache/tenure) as
# guest-HASH/{vmlinuz,initrd.img,packages}; prints that directory.
#
#   - the kernel of linux-image-amd64 (the package it depends on), and the
#     modules the guest loads: virtio-net's and dummy's (Debian builds them
#     as modules);
#   - busybox-static: the guest's shell, ip, insmod and cpio (which packs
#     the initramfs);
#   - isc-dhcp-client's dhclient and the libc6 it links against: the
#     guest's DHCPv6 client;
#   - hack/guest/init and hack/guest/dhclient-script.
#
# HASH covers this script, hack/guest/ and the package versions apt
# resolves, so a new kernel or an edited init builds a new guest. It needs
# apt's package lists (apt-get update) and the archive to download from.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${TENURE_CACHE_DIR:-$HOME/.cache/tenure}"

kpkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^  Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
[[ -n "$kpkg" ]] || { echo "build-guest: apt resolves no kernel for linux-image-amd64 (apt-get update?)" >&2; exit 1; }
pkgs=("$kpkg" busybox-static isc-dhcp-client libc6)
versions=""
for p in "${pkgs[@]}"; do
  v=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
  [[ -n "$v" && "$v" != "(none)" ]] || { echo "build-guest: apt has no candidate for $p" >&2; exit 1; }
  versions+="$p=$v"$'\n'
done
hash=$( { cat "$0" "$root"/hack/guest/*; printf '%s' "$versions"; } | sha256sum | cut -c1-16)
out="$cache/guest-$hash"
if [[ -f "$out/initrd.img" ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/guest-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building the test guest -> $out" >&2
(cd "$work" && apt-get download -qq $(printf '%s\n' "$versions" | sed '/^$/d') 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
mkdir -p "$work/deb"
for d in "$work"/*.deb; do dpkg-deb -x "$d" "$work/deb"; done
deb="$work/deb"
kver=${kpkg#linux-image-}
mods="$deb/lib/modules/$kver/kernel"

rd="$work/initrd"
mkdir -p "$rd"/{bin,sbin,etc,proc,sys,dev,run,tmp,var/lib/dhcp,lib/modules,lib/x86_64-linux-gnu,lib64}
install -m 0755 "$deb/bin/busybox" "$rd/bin/busybox"
install -m 0755 "$deb/sbin/dhclient" "$rd/sbin/dhclient"
install -m 0755 "$root/hack/guest/init" "$rd/init"
install -m 0755 "$root/hack/guest/dhclient-script" "$rd/sbin/dhclient-script"
ln -s busybox "$rd/bin/sh"
: >"$rd/etc/dhclient.conf"
# dhclient's shared libraries, from libc6 (ldd names them; the files are
# the package's, not the host's).
for lib in $(ldd "$deb/sbin/dhclient" | awk '$2 == "=>" {print $1} $1 ~ /^\// {print $1}'); do
  name=$(basename "$lib")
  src=$(find "$deb/lib" "$deb/usr/lib" -name "$name" 2>/dev/null | head -1)
  [[ -n "$src" ]] || { echo "build-guest: libc6 holds no $name" >&2; exit 1; }
  cp -L "$src" "$rd/lib/x86_64-linux-gnu/$name"
done
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$rd/lib64/ld-linux-x86-64.so.2"
# The modules in load order: each after those its modinfo depends= names.
for m in net/core/failover drivers/net/net_failover drivers/virtio/virtio_ring drivers/virtio/virtio \
         drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci \
         drivers/net/virtio_net drivers/net/dummy; do
  f="$mods/$m.ko"
  if [[ ! -f "$f" && -f "$f.xz" ]]; then xz -dc "$f.xz" >"$rd/lib/modules/$(basename "$f")"
  elif [[ -f "$f" ]]; then cp "$f" "$rd/lib/modules/"
  else echo "build-guest: $kpkg has no $m.ko" >&2; exit 1
  fi
  basename "$f" >>"$rd/lib/modules/order"
done

mkdir -p "$work/out"
cp "$deb/boot/vmlinuz-$kver" "$work/out/vmlinuz"
(cd "$rd" && find . -mindepth 1 | LC_ALL=C sort | "$deb/bin/busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -9 >"$work/out/initrd.img"
printf '%s' "$versions" >"$work/out/packages"
rm -rf "$out"
mv "$work/out" "$out"
echo "$out"
