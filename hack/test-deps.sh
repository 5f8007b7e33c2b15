#!/usr/bin/env bash
# Installs the Debian packages the tests drive (the real DHCPv6 clients dhclient and dhcpcd,
# iproute2, util-linux's setpriv, runc for the local node, prometheus and promtool) when they are missing; without root it
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
((${#need[@]})) || exit 0
if [[ $(id -u) != 0 ]]; then
  echo "the tests need: ${need[*]} (apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
# The tests start their own Prometheus on loopback; the package's service
# (enabled on a systemd host) is not theirs to run.
if [[ " ${need[*]} " == *" prometheus "* ]] && [[ -d /run/systemd/system ]]; then
  systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
fi
