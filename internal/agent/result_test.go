package agent

import (
	"bytes"
	"encoding/json"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// encodeResult writes what encoding/json writes, for the results an ADD
// returns and for whatever else a result may hold.
func FuzzResultIsEncodedAsEncodingJSONEncodesIt(f *testing.F) {
	f.Add("1.1.0", []byte{10, 0, 0, 5, 255, 255, 255, 0, 10, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}, 0, 0, 0, -1, -1, -1, "10.0.0.53", "example.com", "svc.local", "ndots:2", 1)
	f.Add("", []byte{}, []byte{1, 2, 3}, 1500, 1460, 10, 254, 0, 2, "<&>", "\u2028", "\xff", "", 3)
	f.Add("1.0.0", []byte{192, 168, 1, 1, 255, 255, 0, 0}, []byte{192, 168, 1, 254}, 1<<62, -(1 << 55), 9007199254740993, 1000000000000000, 0, 7, "a", "", "", "", 2)
	f.Add("0.4.0", []byte{32, 1, 13, 184, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{}, 0, 0, 0, 0, 0, 0, "", "", "", "", 0)
	f.Fuzz(func(t *testing.T, version string, ipBytes, gwBytes []byte, mtu, advmss, prio, table, scope, iface int, ns, domain, search, option string, n int) {
		res := &current.Result{CNIVersion: version}
		// Addresses and masks of every length, valid or not, from ipBytes.
		for i := range n % 4 {
			ip := net.IP(cut(ipBytes, i, 4+12*(i%2)))
			mask := net.IPMask(cut(ipBytes, i+1, len(ip)))
			ipc := &current.IPConfig{Address: net.IPNet{IP: ip, Mask: mask}, Gateway: net.IP(cut(gwBytes, i, len(gwBytes)))}
			if iface >= 0 && i%2 == 1 {
				ipc.Interface = &iface
			}
			res.IPs = append(res.IPs, ipc)
			rt := &types.Route{Dst: net.IPNet{IP: ip, Mask: mask}, GW: net.IP(cut(gwBytes, i+1, len(gwBytes))), MTU: mtu, AdvMSS: advmss, Priority: prio}
			if table >= 0 {
				rt.Table = &table
			}
			if scope >= 0 && i%2 == 0 {
				rt.Scope = &scope
			}
			res.Routes = append(res.Routes, rt)
		}
		for _, s := range []string{ns, search, option} {
			if s != "" {
				res.DNS.Nameservers = append(res.DNS.Nameservers, s)
				res.DNS.Search = append(res.DNS.Search, s+search)
				res.DNS.Options = append(res.DNS.Options, option)
			}
		}
		res.DNS.Domain = domain
		// Converted to an older version, a result goes to encoding/json.
		if old, err := res.GetAsVersion("0.4.0"); err == nil {
			want, wantErr := json.Marshal(old)
			got, err := encodeResult(old)
			if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
				t.Fatalf("0.4.0: encodeResult:\n%s, %v\nencoding/json:\n%s, %v", got, err, want, wantErr)
			}
		}
		if n%5 == 4 {
			res.IPs = append(res.IPs, nil) // encoding/json writes null
		}
		want, wantErr := json.Marshal(res)
		got, err := encodeResult(res)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("encodeResult:\n%s, %v\nencoding/json:\n%s, %v", got, err, want, wantErr)
		}
	})
}

// cut is up to n bytes of b from offset i (wrapping), nil for an empty b.
func cut(b []byte, i, n int) []byte {
	if len(b) == 0 || n <= 0 {
		return nil
	}
	out := make([]byte, n)
	for j := range out {
		out[j] = b[(i+j)%len(b)]
	}
	return out
}

// An ADD's result takes the hand-written path, not encoding/json's.
func TestAnADDsResultIsWrittenByHand(t *testing.T) {
	one := 1
	res := &current.Result{CNIVersion: "1.1.0",
		IPs:    []*current.IPConfig{{Address: net.IPNet{IP: net.IPv4(10, 0, 0, 5).To4(), Mask: net.CIDRMask(24, 32)}, Gateway: net.IPv4(10, 0, 0, 1).To4()}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Table: &one}},
		DNS:    types.DNS{Nameservers: []string{"10.0.0.53"}}}
	b, ok := appendResult(nil, res)
	if !ok {
		t.Fatal("appendResult refused an ADD's result")
	}
	want := `{"cniVersion":"1.1.0","dns":{"nameservers":["10.0.0.53"]},"ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0","table":1}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// BenchmarkResult is an ADD's result written by encodeResult and by
// encoding/json.
func BenchmarkResult(b *testing.B) {
	res := &current.Result{CNIVersion: "1.1.0",
		IPs:    []*current.IPConfig{{Address: net.IPNet{IP: net.IPv4(10, 0, 0, 5).To4(), Mask: net.CIDRMask(24, 32)}, Gateway: net.IPv4(10, 0, 0, 1).To4()}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}}}
	b.Run("encodeResult", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeResult(res)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(res)
		}
	})
}
