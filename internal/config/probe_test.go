package config

import (
	"errors"
	"strings"
	"testing"
)

func TestProbeInterfaceIsTheMainPluginsParent(t *testing.T) {
	const ipam = `"ipam":{"type":"tenure","range":"10.0.0.0/24"`
	for _, tc := range []struct {
		name, netconf       string
		probe               bool
		iface               string
		defaultRoute, skips bool
	}{
		{"macvlan master", `{"name":"n","type":"macvlan","master":"san0",` + ipam + `}}`, true, "san0", false, false},
		{"macvlan without master: the default route's", `{"name":"n","type":"macvlan",` + ipam + `}}`, true, "", true, false},
		{"ipvlan l2 master", `{"name":"n","type":"ipvlan","master":"bond0.12","mode":"l2",` + ipam + `}}`, true, "bond0.12", false, false},
		{"ipvlan l3: no neighbour discovery", `{"name":"n","type":"ipvlan","master":"eth1","mode":"l3",` + ipam + `}}`, true, "", false, true},
		{"bridge", `{"name":"n","type":"bridge","bridge":"san-br",` + ipam + `}}`, true, "san-br", false, false},
		{"bridge without a name: cni0", `{"name":"n","type":"bridge",` + ipam + `}}`, true, "cni0", false, false},
		{"bridge with a VLAN", `{"name":"n","type":"bridge","bridge":"br0","vlan":12,` + ipam + `}}`, true, "", false, true},
		{"sriov: unknown parent", `{"name":"n","type":"sriov","vlan":12,` + ipam + `}}`, true, "", false, true},
		{"probe_interface wins", `{"name":"n","type":"sriov",` + ipam + `,"probe_interface":"ens1f0.12"}}`, true, "ens1f0.12", false, false},
		{"probe off", `{"name":"n","type":"macvlan","master":"eth0",` + ipam + `,"probe":false}}`, false, "", false, false},
		{"a plugin's own master of another type is not read", `{"name":"n","type":"other","master":{"x":1},` + ipam + `}}`, true, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.netconf), nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Probe != tc.probe || c.ProbeInterface != tc.iface || c.ProbeDefaultRoute != tc.defaultRoute || (c.ProbeSkipped != "") != tc.skips {
				t.Fatalf("Probe %v ProbeInterface %q ProbeDefaultRoute %v ProbeSkipped %q; want %v %q %v skipped=%v",
					c.Probe, c.ProbeInterface, c.ProbeDefaultRoute, c.ProbeSkipped, tc.probe, tc.iface, tc.defaultRoute, tc.skips)
			}
			if cl := c.Clone(); cl.Probe != c.Probe || cl.ProbeInterface != c.ProbeInterface {
				t.Fatalf("Clone lost the probe keys: %+v", cl)
			}
		})
	}
}

func TestBadProbeKeysAreErrorsNamingTheKey(t *testing.T) {
	const ipam = `"ipam":{"type":"tenure","range":"10.0.0.0/24"`
	for _, tc := range []struct{ netconf, key, value string }{
		{`{"name":"n","type":"macvlan","master":"eth0",` + ipam + `,"probe":"no"}}`, "ipam.probe", `"no"`},
		{`{"name":"n","type":"macvlan","master":"eth0",` + ipam + `,"probe_interface":"a/b"}}`, "ipam.probe_interface", `"a/b"`},
		{`{"name":"n","type":"macvlan","master":"eth0",` + ipam + `,"probe_interface":"sixteen-bytes-xx"}}`, "ipam.probe_interface", `"sixteen-bytes-xx"`},
		{`{"name":"n","type":"macvlan","master":7,` + ipam + `}}`, "master", "7"},
		{`{"name":"n","type":"bridge","bridge":"has space",` + ipam + `}}`, "bridge", `"has space"`},
	} {
		_, err := Parse([]byte(tc.netconf), nil)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Value != tc.value {
			t.Errorf("Parse(%s) = %v, want an Error of key %s value %s", tc.netconf, err, tc.key, tc.value)
		}
		if err != nil && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("message %q does not name %s", err, tc.key)
		}
	}
}
