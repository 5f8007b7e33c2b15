#!/usr/bin/env bash
# Installs the Debian packages the tests drive (the real DHCPv6 clients dhclient and dhcpcd,
# iproute2, util-linux's setpriv, runc for the local node, prometheus and promtool,
# QEMU for the test guest) when they are missing; without root it
# fails and names what to install, so no test skips for a missing tool.
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v dhclient >/dev/null || need+=(isc-dhcp-client)
# dhcpcd: the DHCPv6 client of the guests with stock settings (Debian's
# dhcpcd-base holds the binary, without the system service).
command -v dhcpcd >/dev/null || need+=(dhcpcd-base)
command -v setpriv >/dev/null || need+=(util-linux)
command -v runc >/dev/null || need+=(runc)
# promtool runs the alerts' unit tests, prometheus the end-to-end test
# that scrapes agents and controller (test/monitoring).
command -v promtool >/dev/null || need+=(prometheus)
# qemu-system-x86: the real VM of test/guest.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
((${#need[@]})) || exit 0
if [[ $(id -u) != 0 ]]; then
  echo "the tests need: ${need[*]} (apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# QEMU without its recommends (a GUI, firmware images): the guest boots
# its kernel directly.
rest=()
for p in "${need[@]}"; do
  if [[ $p == qemu-system-x86 ]]; then
    apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
  else
    rest+=("$p")
  fi
done
if ((${#rest[@]})); then
  apt-get install -y -qq "${rest[@]}" >/dev/null
fi
# The tests start their own Prometheus on loopback; the package's service
# (enabled on a systemd host) is not theirs to run.
if [[ " ${need[*]} " == *" prometheus "* ]] && [[ -d /run/systemd/system ]]; then
  systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
fi
