package agent

import (
	"encoding/json"
	"math"
	"net"
	"strconv"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// encodeResult is json.Marshal(res), byte for byte. A CNI 1.x result
// without interfaces, what an IPAM ADD returns, is written by hand: its
// MarshalJSON encodes it, decodes that into maps and encodes the maps (to
// drop an empty "dns"), a few percent of an ADD's CPU. So the bytes are
// those of maps: keys sorted, numbers as float64s. Anything else, and
// anything encoding/json would refuse, write as null or rewrite (invalid
// UTF-8), goes to encoding/json.
func encodeResult(res types.Result) ([]byte, error) {
	if b, ok := appendResult(make([]byte, 0, 512), res); ok {
		return b, nil
	}
	return json.Marshal(res)
}

func appendResult(b []byte, res types.Result) ([]byte, bool) {
	r, ok := res.(*current.Result)
	if !ok || r == nil || len(r.Interfaces) > 0 {
		return nil, false
	}
	w := resultWriter{b: b, ok: true}
	w.open('{')
	if r.CNIVersion != "" {
		w.str("cniVersion", r.CNIVersion)
	}
	if d := &r.DNS; !d.IsEmpty() {
		w.key("dns")
		w.open('{')
		if d.Domain != "" {
			w.str("domain", d.Domain)
		}
		w.strs("nameservers", d.Nameservers)
		w.strs("options", d.Options)
		w.strs("search", d.Search)
		w.close('}')
	}
	if len(r.IPs) > 0 {
		w.key("ips")
		w.open('[')
		for _, ip := range r.IPs {
			if ip == nil || !validIP(ip.Gateway) {
				return nil, false
			}
			w.elem()
			w.open('{')
			w.str("address", ip.Address.String())
			w.ip("gateway", ip.Gateway)
			w.intPtr("interface", ip.Interface)
			w.close('}')
		}
		w.close(']')
	}
	if len(r.Routes) > 0 {
		w.key("routes")
		w.open('[')
		for _, rt := range r.Routes {
			if rt == nil || !validIP(rt.GW) {
				return nil, false
			}
			w.elem()
			w.open('{')
			w.int("advmss", rt.AdvMSS)
			w.str("dst", rt.Dst.String())
			w.ip("gw", rt.GW)
			w.int("mtu", rt.MTU)
			w.int("priority", rt.Priority)
			w.intPtr("scope", rt.Scope)
			w.intPtr("table", rt.Table)
			w.close('}')
		}
		w.close(']')
	}
	w.close('}')
	return w.b, w.ok
}

// validIP says whether encoding/json writes ip (an omitempty net.IP) at
// all: a net.IP of another length than 4 or 16 is an error there.
func validIP(ip net.IP) bool {
	return len(ip) == 0 || len(ip) == net.IPv4len || len(ip) == net.IPv6len
}

// resultWriter appends a JSON object's members in the order given; ok
// turns false on a string encoding/json would rewrite.
type resultWriter struct {
	b     []byte
	ok    bool
	first bool // the next member or element is its container's first
}

func (w *resultWriter) open(c byte)  { w.b = append(w.b, c); w.first = true }
func (w *resultWriter) close(c byte) { w.b = append(w.b, c); w.first = false }

// elem starts a member without a key: an array's element.
func (w *resultWriter) elem() {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
}

func (w *resultWriter) key(k string) {
	w.elem()
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *resultWriter) quoted(s string) {
	// encoding/json writes invalid UTF-8 as \ufffd, which the maps then
	// hold as the character itself: left to encoding/json.
	if !utf8.ValidString(s) {
		w.ok = false
	}
	w.b = cniwire.AppendString(w.b, s)
}

func (w *resultWriter) str(k, s string) {
	w.key(k)
	w.quoted(s)
}

func (w *resultWriter) strs(k string, v []string) {
	if len(v) == 0 {
		return
	}
	w.key(k)
	w.open('[')
	for _, s := range v {
		w.elem()
		w.quoted(s)
	}
	w.close(']')
}

// ip writes an omitempty net.IP member.
func (w *resultWriter) ip(k string, ip net.IP) {
	if len(ip) > 0 {
		w.str(k, ip.String())
	}
}

// int writes an omitempty int member.
func (w *resultWriter) int(k string, v int) {
	if v != 0 {
		w.intPtr(k, &v)
	}
}

// intPtr writes an omitempty *int member: set, it is written even when 0.
func (w *resultWriter) intPtr(k string, v *int) {
	if v == nil {
		return
	}
	w.key(k)
	w.b = appendFloat64(w.b, float64(*v))
}

// appendFloat64 is how encoding/json writes a float64, which is what a
// number decoded into an interface{} is.
func appendFloat64(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json cleans it up.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
