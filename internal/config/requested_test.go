package config

import (
	"net/netip"
	"slices"
	"testing"
)

// withIPs is a network config whose runtimeConfig carries ips (as libcni
// writes it for a delegate with the "ips" capability) besides another
// plugin's runtime key.
func withIPs(ips, ipam string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"net1","type":"macvlan","master":"eth0",` +
		`"runtimeConfig":{"portMappings":[],"ips":` + ips + `},"ipam":` + ipam + `}`)
}

const dualStack = `{"type":"tenure","gateway":"10.0.0.1","ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.200/29"]},{"range":"fd00::/64"}]}`

func TestParseRequested(t *testing.T) {
	cases := []struct {
		name, ips, ipam string
		want            []string // per range, "" for none
	}{
		{"CIDR", `["10.0.0.5/24"]`, dualStack, []string{"10.0.0.5", ""}},
		{"bare address, as host-local accepts", `["10.0.0.5"]`, dualStack, []string{"10.0.0.5", ""}},
		{"one per family, in any order", `["fd00::5/64","10.0.0.5"]`, dualStack, []string{"10.0.0.5", "fd00::5"}},
		{"only IPv6", `["fd00::5"]`, dualStack, []string{"", "fd00::5"}},
		{"empty list asks for nothing", `[]`, dualStack, nil},
		{"the second of two IPv4 ranges", `["10.1.0.7/16"]`, `{"type":"tenure","ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.1.0.0/16"}]}`, []string{"", "10.1.0.7"}},
		{"range_start and range_end bound it", `["10.0.0.20"]`, `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.10","range_end":"10.0.0.20"}`, []string{"10.0.0.20"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(withIPs(tc.ips, tc.ipam), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range c.Requested {
				s := ""
				if a.IsValid() {
					s = a.String()
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Requested = %q, want %q", got, tc.want)
			}
		})
	}

	// Without runtimeConfig.ips nothing is requested.
	if c := mustParse(t, dualStack); c.Requested != nil {
		t.Errorf("Requested = %v without runtimeConfig.ips", c.Requested)
	}
}

func TestParseRequestedErrors(t *testing.T) {
	cases := []struct {
		name, ips, ipam, key string
		has                  []string
	}{
		{"not a list", `"10.0.0.5"`, dualStack, "runtimeConfig.ips", []string{`"10.0.0.5"`, "must be an array"}},
		{"not a string", `[5]`, dualStack, "runtimeConfig.ips[0]", []string{"5", "must be a string"}},
		{"not an address", `["ten.0.0.5"]`, dualStack, "runtimeConfig.ips[0]", []string{`"ten.0.0.5"`, "not an IP address or CIDR"}},
		{"bad CIDR", `["10.0.0.5/33"]`, dualStack, "runtimeConfig.ips[0]", []string{`"10.0.0.5/33"`, "not an IP address or CIDR"}},
		{"two of one family", `["10.0.0.5","fd00::5","10.0.0.6"]`, dualStack, "runtimeConfig.ips[2]",
			[]string{`"10.0.0.6"`, `second IPv4 address after runtimeConfig.ips[0] "10.0.0.5"`, "one address per family"}},
		{"outside every range", `["10.9.9.9/24"]`, dualStack, "runtimeConfig.ips[0]",
			[]string{`"10.9.9.9/24"`, `outside every range (ipam.ipRanges[0].range "10.0.0.0/24", ipam.ipRanges[1].range "fd00::/64")`}},
		{"a family without a range", `["fd00::5"]`, `{"type":"tenure","range":"10.0.0.0/24"}`, "runtimeConfig.ips[0]", []string{`"fd00::5"`, "outside every range"}},
		{"excluded", `["10.0.0.201"]`, dualStack, "runtimeConfig.ips[0]",
			[]string{`"10.0.0.201"`, `excluded from ipam.ipRanges[0].range "10.0.0.0/24" by ipam.ipRanges[0].exclude[0] "10.0.0.200/29"`}},
		{"the gateway", `["10.0.0.1/24"]`, dualStack, "runtimeConfig.ips[0]", []string{`"10.0.0.1/24"`, `the gateway (ipam.gateway "10.0.0.1")`, "never handed out"}},
		{"the network address", `["10.0.0.0"]`, dualStack, "runtimeConfig.ips[0]", []string{`"10.0.0.0"`, "not assignable", "from 10.0.0.1 to 10.0.0.254"}},
		{"the broadcast address", `["10.0.0.255"]`, dualStack, "runtimeConfig.ips[0]", []string{"not assignable"}},
		{"before range_start", `["10.0.0.9"]`, `{"type":"tenure","range":"10.0.0.0/24","range_start":"10.0.0.10"}`, "runtimeConfig.ips[0]", []string{"from 10.0.0.10 to 10.0.0.254"}},
		{"another prefix length", `["10.0.0.5/16"]`, dualStack, "runtimeConfig.ips[0]",
			[]string{`"10.0.0.5/16"`, `prefix length /16`, `ipam.ipRanges[0].range "10.0.0.0/24"`, "is a /24"}},
		{"runtimeConfig not an object", ``, dualStack, "runtimeConfig", []string{"must be an object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := withIPs(tc.ips, tc.ipam)
			if tc.ips == "" {
				conf = []byte(`{"cniVersion":"1.0.0","name":"net1","runtimeConfig":["ips"],"ipam":` + tc.ipam + `}`)
			}
			c, err := Parse(conf, nil)
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			checkErr(t, err, tc.key, tc.has)
		})
	}
}

// TestRequestedFromAPool: a config naming a pool checks the request
// against the pool's ranges, when it is applied.
func TestRequestedFromAPool(t *testing.T) {
	c, err := Parse(withIPs(`["10.1.0.20/24"]`, `{"type":"tenure","pool":"blue"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyPool("blue", bluePool()); err != nil {
		t.Fatal(err)
	}
	if len(c.Requested) != 2 || c.Requested[0] != netip.MustParseAddr("10.1.0.20") || c.Requested[1].IsValid() {
		t.Errorf("Requested = %v", c.Requested)
	}
	c, err = Parse(withIPs(`["10.1.0.50"]`, `{"type":"tenure","pool":"blue"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkErr(t, c.ApplyPool("blue", bluePool()), "runtimeConfig.ips[0]", []string{`excluded from IPPool blue spec.ranges[0].range "10.1.0.0/24" by IPPool blue spec.ranges[0].exclude[0] "10.1.0.50/31"`})
	if c.Ranges != nil || c.Requested != nil {
		t.Errorf("a refused pool changed the config: %v %v", c.Ranges, c.Requested)
	}
}

func TestParseStickyStatefulSets(t *testing.T) {
	if c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24"}`); c.StickyStatefulSets {
		t.Error("sticky by default")
	}
	if c := mustParse(t, `{"type":"tenure","range":"10.0.0.0/24","sticky_statefulsets":true}`); !c.StickyStatefulSets {
		t.Error("sticky_statefulsets true not read")
	}
	c, err := Parse(nad(`{"type":"tenure","range":"10.0.0.0/24"}`), []byte(`{"sticky_statefulsets":true}`))
	if err != nil || !c.StickyStatefulSets {
		t.Errorf("from the flat file: %v %v", c, err)
	}
	_, err = Parse(nad(`{"type":"tenure","range":"10.0.0.0/24","sticky_statefulsets":"yes"}`), nil)
	checkErr(t, err, "ipam.sticky_statefulsets", []string{`"yes"`, "true or false"})
}
