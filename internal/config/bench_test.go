package config

import "testing"

// BenchmarkParse is the cost of reading a config on every ADD: a
// whereabouts config, and a dual-stack one with delegation, DHCPv6 and a
// requested address over a flat file.
func BenchmarkParse(b *testing.B) {
	dual := withIPs(`["10.0.0.5/24"]`, `{"type":"tenure","gateway":"10.0.0.1","network_name":"blue",
		"ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.200/29"]},{"range":"fd00::/64","range_start":"fd00::10"}],
		"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}],"dns":{"nameservers":["10.96.0.10"]},
		"prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56},
		"dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:5e:00:53:01"}]}}`)
	flat := []byte(`{"datastore":"kubernetes","kubernetes":{"kubeconfig":"/k"},"log_level":"debug","agent_socket":"/run/t/agent.sock"}`)
	for _, bc := range []struct {
		name          string
		netconf, flat []byte
	}{
		{"whereabouts", []byte(whereaboutsNAD), nil},
		{"dual-stack", dual, flat},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bc.netconf, bc.flat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
