package agent

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
)

func TestClaimRequestSlotsPlacesRequestsOrNamesTheReason(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"cniVersion":"1.0.0","name":"vm","type":"bridge","ipam":{"type":"tenure","gateway":"10.0.0.1",
		"ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.200/29"]},{"range":"fd00::/64"}],"prefix_delegation":{"range":"2001:db8::/48","prefix_length":56}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ss := slots(cfg, true)
	ip := func(s string, bits int) claims.RequestedIP {
		return claims.RequestedIP{Addr: netip.MustParseAddr(s), Bits: bits}
	}
	for _, tc := range []struct {
		name   string
		req    claims.Requested
		want   []string // per slot, "" for none
		reason string
		msg    string
	}{
		{"both families and the prefix", claims.Requested{Addresses: []claims.RequestedIP{ip("fd00::9", -1), ip("10.0.0.9", 24)}, Prefix: netip.MustParsePrefix("2001:db8:0:500::/56")},
			[]string{"10.0.0.9/32", "fd00::9/128", "2001:db8:0:500::/56"}, "", ""},
		{"one family only", claims.Requested{Addresses: []claims.RequestedIP{ip("10.0.0.9", -1)}}, []string{"10.0.0.9/32", "", ""}, "", ""},
		{"outside every subnet", claims.Requested{Addresses: []claims.RequestedIP{ip("10.9.0.9", -1)}}, nil,
			ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, "asks for 10.9.0.9 (annotation ipam.tenure.dev/requested-ips), which is in no subnet of the network (10.0.0.0/24, fd00::/64, 2001:db8::/48 as /56)"},
		{"another prefix length", claims.Requested{Addresses: []claims.RequestedIP{ip("10.0.0.9", 16)}}, nil,
			ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, "asks for 10.0.0.9/16"},
		{"the gateway", claims.Requested{Addresses: []claims.RequestedIP{ip("10.0.0.1", -1)}}, nil,
			ipamclaimsv1alpha1.ReasonReservedIPRequested, "asks for 10.0.0.1 (annotation ipam.tenure.dev/requested-ips), which range 10.0.0.0/24 never hands out"},
		{"an excluded address", claims.Requested{Addresses: []claims.RequestedIP{ip("10.0.0.201", -1)}}, nil,
			ipamclaimsv1alpha1.ReasonReservedIPRequested, "10.0.0.201"},
		{"a prefix outside the delegation pool", claims.Requested{Prefix: netip.MustParsePrefix("2001:db9::/56")}, nil,
			ipamclaimsv1alpha1.ReasonRequestedIPOutsideSubnet, "the delegated prefix 2001:db9::/56 (annotation ipam.tenure.dev/requested-prefix)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := claimRequestSlots("vms/vm1", ss, tc.req)
			if tc.reason != "" {
				var ce *claimRequestError
				if !errors.As(err, &ce) || ce.reason != tc.reason || !strings.Contains(ce.msg, tc.msg) || !strings.HasPrefix(ce.msg, "IPAMClaim vms/vm1 ") {
					t.Fatalf("err %v, want %s with %q", err, tc.reason, tc.msg)
				}
				if toCNI(err).Code != 7 {
					t.Fatalf("CNI code %d, want 7", toCNI(err).Code)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v %v", got, err)
			}
			for i, w := range tc.want {
				if (w == "") != !got[i].IsValid() || (w != "" && got[i].String() != w) {
					t.Errorf("slot %d (%s): %v, want %q", i, ss[i].Space, got[i], w)
				}
			}
		})
	}
}
