package config

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// scribble changes every value reachable from v (addressable), unexported
// fields included, so memory a clone shares with its original shows up as
// a change in the original. Values of netip types and time.Duration are
// replaced whole: their insides are not the config's memory.
func scribble(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if !v.CanSet() {
		v = reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	}
	switch v.Type() {
	case reflect.TypeFor[netip.Addr]():
		v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.99")))
		return
	case reflect.TypeFor[netip.Prefix]():
		v.Set(reflect.ValueOf(netip.MustParsePrefix("192.0.2.96/30")))
		return
	case reflect.TypeFor[time.Duration]():
		v.SetInt(v.Int() + 7)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			scribble(t, v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			scribble(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		for i := range v.Len() {
			scribble(t, v.Index(i), path+"[]")
		}
	case reflect.String:
		v.SetString(v.String() + "~")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	default:
		// A new kind of field (map, interface, ...) needs Clone and this
		// walk to learn it.
		t.Fatalf("%s: scribble does not handle kind %s", path, v.Kind())
	}
}

// TestCloneSharesNothing changes everything reachable from a clone, then
// compares the original with a fresh Parse of the same bytes: configs
// with every kind of field set, and a pool config after ApplyPool (which is
// then applied again to a clone, as the agent does for each newer spec).
func TestCloneSharesNothing(t *testing.T) {
	full := withIPs(`["10.0.0.5/24"]`, `{"type":"tenure","gateway":"10.0.0.1","network_name":"blue","enable_overlapping_ranges":false,
		"ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.200/29"]},{"range":"fd00::/64","range_start":"fd00::10"}],
		"routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1","mtu":1400,"table":100,"scope":1}],
		"dns":{"nameservers":["10.96.0.10"],"domain":"cluster.local","search":["svc"],"options":["ndots:5"]},
		"prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56},
		"sticky_statefulsets":true,"kubernetes":{"kubeconfig":"/k"},
		"dhcpv6":{"interfaces":["br0"],"trusted_relays":[{"interface":"br0","mac":"02:00:5e:00:53:01","address":"fe80::1"}]}}`)
	flat := []byte(`{"log_level":"debug","agent_socket":"/run/t/agent.sock"}`)
	pool := withIPs(`["10.1.0.20"]`, `{"type":"tenure","pool":"blue"}`)
	for _, tc := range []struct {
		name          string
		netconf, flat []byte
		pool          bool
	}{
		{"full", full, flat, false},
		{"whereabouts", []byte(whereaboutsNAD), nil, false},
		{"pool", pool, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load := func() *Config {
				c, err := Parse(tc.netconf, tc.flat)
				if err != nil {
					t.Fatal(err)
				}
				if tc.pool {
					if err := c.ApplyPool("blue", bluePool()); err != nil {
						t.Fatal(err)
					}
				}
				return c
			}
			orig, fresh := load(), load()
			c := orig.Clone()
			if !reflect.DeepEqual(c, orig) {
				t.Fatalf("Clone differs from its original:\n%+v\n%+v", c, orig)
			}
			if tc.pool {
				spec := bluePool()
				spec.Ranges[0].Exclude = append(spec.Ranges[0].Exclude, "10.1.0.60/31")
				if err := c.ApplyPool("blue", spec); err != nil {
					t.Fatal(err)
				}
				if reflect.DeepEqual(c, orig) {
					t.Fatal("ApplyPool of a changed spec left the clone equal to the original")
				}
			}
			scribble(t, reflect.ValueOf(c).Elem(), "Config")
			if reflect.DeepEqual(c, fresh) {
				t.Fatal("scribble changed nothing")
			}
			if !reflect.DeepEqual(orig, fresh) {
				t.Errorf("changing the clone changed the original:\n%+v\nwant\n%+v", orig, fresh)
			}
		})
	}
}
