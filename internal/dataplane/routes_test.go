package dataplane

import (
	"net/netip"
	"slices"
	"testing"
)

func route(prefix, via, dev string) Route {
	return Route{Prefix: netip.MustParsePrefix(prefix), Via: netip.MustParseAddr(via), Dev: dev}
}

func TestDesiredRoutes(t *testing.T) {
	cases := []struct {
		name  string
		bs    []Binding
		heard map[string]string
		want  []Route
	}{
		{name: "address and prefix: first interface",
			bs:   []Binding{binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0", "br1")},
			want: []Route{route("fd00:9000:0:700::/56", "fd00::7", "br0")}},
		{name: "client heard on the second interface",
			bs:    []Binding{binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0", "br1")},
			heard: map[string]string{"vms/a": "br1"},
			want:  []Route{route("fd00:9000:0:700::/56", "fd00::7", "br1")}},
		{name: "heard on an interface the network no longer lists",
			bs:    []Binding{binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0")},
			heard: map[string]string{"vms/a": "br9"},
			want:  []Route{route("fd00:9000:0:700::/56", "fd00::7", "br0")}},
		{name: "install_routes false",
			bs: []Binding{binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", false, "br0")}},
		{name: "claim without prefix",
			bs: []Binding{binding("vms/a", "fd00::7", "", true, "br0")}},
		{name: "claim without IPv6 address: nothing to route via",
			bs: []Binding{binding("vms/a", "", "fd00:9000:0:700::/56", true, "br0")}},
		{name: "sorted by prefix; unmasked prefix masked",
			bs: []Binding{
				binding("vms/b", "fd00::8", "fd00:9000:0:800::/56", true, "br0"),
				binding("vms/a", "fd00::7", "fd00:9000:0:701::/56", true, "br0"),
			},
			want: []Route{route("fd00:9000:0:700::/56", "fd00::7", "br0"), route("fd00:9000:0:800::/56", "fd00::8", "br0")}},
		{name: "one prefix twice: the first binding wins",
			bs: []Binding{
				binding("vms/a", "fd00::7", "fd00:9000:0:700::/56", true, "br0"),
				binding("vms/b", "fd00::8", "fd00:9000:0:700::/56", true, "br0"),
			},
			want: []Route{route("fd00:9000:0:700::/56", "fd00::7", "br0")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DesiredRoutes(c.bs, c.heard); !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlanRoutes(t *testing.T) {
	a := route("fd00:9000:0:700::/56", "fd00::7", "br0")
	b := route("fd00:9000:0:800::/56", "fd00::8", "br0")
	aMoved := route("fd00:9000:0:700::/56", "fd00::7", "br1")
	aNewVia := route("fd00:9000:0:700::/56", "fd00::9", "br0")
	aGone := route("fd00:9000:0:700::/56", "fd00::7", "")
	cases := []struct {
		name            string
		want, have      []Route
		replace, remove []Route
	}{
		{name: "nothing"},
		{name: "install", want: []Route{a, b}, replace: []Route{a, b}},
		{name: "in place: idempotent", want: []Route{a, b}, have: []Route{b, a}},
		{name: "owner moved away: remove", have: []Route{a}, remove: []Route{a}},
		{name: "one stays one goes", want: []Route{b}, have: []Route{a, b}, remove: []Route{a}},
		{name: "different interface: replace", want: []Route{aMoved}, have: []Route{a}, replace: []Route{aMoved}},
		{name: "different next hop: replace", want: []Route{aNewVia}, have: []Route{a}, replace: []Route{aNewVia}},
		{name: "interface vanished: replace", want: []Route{a}, have: []Route{aGone}, replace: []Route{a}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, rem := PlanRoutes(c.want, c.have)
			if !slices.Equal(rep, c.replace) || !slices.Equal(rem, c.remove) {
				t.Fatalf("replace %v remove %v, want %v %v", rep, rem, c.replace, c.remove)
			}
		})
	}
}
