package claims

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
)

func TestRequestedOf(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ips, prefix string // "-" for no annotation
		want        []RequestedIP
		wantPrefix  string
		err         string
	}{
		{"nothing", "-", "-", nil, "", ""},
		{"CIDR and bare IP, prefix", "10.0.0.5/24, fd00::5", "2001:db8:100::/56",
			[]RequestedIP{{netip.MustParseAddr("10.0.0.5"), 24}, {netip.MustParseAddr("fd00::5"), -1}}, "2001:db8:100::/56", ""},
		{"IPv4-mapped is IPv4", "::ffff:10.0.0.5", "-", []RequestedIP{{netip.MustParseAddr("10.0.0.5"), -1}}, "", ""},
		{"two of a family", "10.0.0.5,10.0.0.6", "-", nil, "", `annotation ipam.tenure.dev/requested-ips: "10.0.0.5,10.0.0.6": 10.0.0.6 is a second address of its family`},
		{"not an address", "10.0.0.x", "-", nil, "", `"10.0.0.x" is not an IP address or CIDR`},
		{"empty", "", "-", nil, "", `"" is not an IP address or CIDR`},
		{"prefix not IPv6", "-", "10.0.0.0/24", nil, "", `annotation ipam.tenure.dev/requested-prefix: "10.0.0.0/24": a delegated prefix is IPv6`},
		{"prefix with host bits", "-", "2001:db8:100::1/56", nil, "", "did you mean 2001:db8:100::/56?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1", Annotations: map[string]string{}}}
			if tc.ips != "-" {
				c.Annotations[RequestedIPsAnnotation] = tc.ips
			}
			if tc.prefix != "-" {
				c.Annotations[RequestedPrefixAnnotation] = tc.prefix
			}
			got, err := RequestedOf(c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "IPAMClaim vms/vm1 annotation ") {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got.Addresses, tc.want) || (tc.wantPrefix == "") != !got.Prefix.IsValid() ||
				(tc.wantPrefix != "" && got.Prefix.String() != tc.wantPrefix) {
				t.Fatalf("got %+v %v, want %v %s", got, err, tc.want, tc.wantPrefix)
			}
		})
	}
}
