package config

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
)

// FuzzParse asserts Parse never panics, only returns *Error, and returns
// ranges whose methods agree with each other.
func FuzzParse(f *testing.F) {
	f.Add([]byte(whereaboutsNAD), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"192.168.2.225-192.168.2.230/28","gateway":"192.168.2.226","ipRanges":[{"range":"fd00::/64","exclude":["fd00::2"]}]}`),
		[]byte(`{"datastore":"kubernetes","log_level":"debug"}`))
	f.Add(nad(`{"type":"tenure","range":"10.0.0.0/30","exclude":["10.0.0.1","10.0.0.2/31"]}`), []byte(`{"gateway":"10.0.0.1"}`))
	f.Add(nad(`{"type":"tenure","pool":"blue","dhcpv6":{"interfaces":["net1"],"preferred_lifetime":60}}`), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"2001:db8::/120","range_start":"2001:db8::","range_end":"2001:db8::ff","prefix_delegation":{"range":"2001:db9::/40","prefix_length":56}}`), []byte(nil))
	f.Add(nad(`{"type":"tenure","range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1","table":5}],"dns":{"nameservers":["1.1.1.1"]}}`), []byte(`[]`))
	f.Add([]byte(`{"ipam":{"type":"tenure","range":"0.0.0.0/0","exclude":["0.0.0.0/1"]}}`), []byte(`{"range":1}`))
	f.Add([]byte(`{"ipam":{"type":"tenure","range":"::/0","exclude":["::/1"]}}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, netconf, flat []byte) {
		c, err := Parse(netconf, flat)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Key == "" || e.Reason == "" {
				t.Fatalf("error %v (%T) is not a complete *Error", err, err)
			}
			_ = err.Error()
			return
		}
		if c.Pool != "" {
			_ = c.ApplyPool(c.Pool, v1alpha1.IPPoolSpec{Ranges: []v1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "fd00::/120"}}, Gateway: "10.0.0.1"})
		}
		for _, r := range c.Ranges {
			if r.Capacity() == 0 || r.Capacity() > r.Size() {
				t.Fatalf("range %v: Capacity %d, Size %d", r, r.Capacity(), r.Size())
			}
			for _, off := range []uint64{0, r.Size() / 2, r.Size() - 1} {
				a := r.At(off)
				if o, ok := r.Offset(a); !ok || o != off {
					t.Fatalf("range %v: Offset(At(%d)=%v) = %d, %v", r, off, a, o, ok)
				}
			}
			_ = r.Contains(r.Start)
			_ = r.String()
			if c.Gateway.IsValid() && r.Contains(c.Gateway) {
				t.Fatalf("range %v hands out the gateway %v", r, c.Gateway)
			}
		}
		if pd := c.PrefixDelegation; pd != nil {
			for _, i := range []uint64{0, pd.Count() - 1} {
				q := pd.At(i)
				if j, ok := pd.Index(q); !ok || j != i {
					t.Fatalf("pd %+v: Index(At(%d)=%v) = %d, %v", pd, i, q, j, ok)
				}
			}
			_, _ = pd.Index(netip.Prefix{})
		}
	})
}
