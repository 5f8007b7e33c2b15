package reservation

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// fuzzItem turns fuzz bytes into a reservation item: b[0] picks the family
// (IPv4, IPv6, or IPv4-mapped IPv6) and the kind (address or delegated
// prefix), b[1] the prefix length (modulo the family's), the rest the
// address, zero-padded. Every address and every prefix length is reachable.
func fuzzItem(b []byte) (tenurev1alpha1.ReservationKind, netip.Prefix) {
	var sel, bits byte
	if len(b) > 0 {
		sel, b = b[0], b[1:]
	}
	if len(b) > 0 {
		bits, b = b[0], b[1:]
	}
	var raw [16]byte
	copy(raw[:], b)
	var a netip.Addr
	switch sel % 3 {
	case 0:
		a = netip.AddrFrom4([4]byte(raw[:4]))
	case 1:
		a = netip.AddrFrom16(raw)
	case 2:
		a = netip.AddrFrom16(netip.AddrFrom4([4]byte(raw[:4])).As16()) // ::ffff:a.b.c.d
	}
	if sel/3%2 == 1 {
		return tenurev1alpha1.KindDelegatedPrefix, netip.PrefixFrom(a, int(bits)%(a.BitLen()+1))
	}
	return tenurev1alpha1.KindAddress, netip.PrefixFrom(a, a.BitLen())
}

// canonical is what a name stands for: an address as its plain form (an
// IPv4-mapped IPv6 address is its IPv4 address, as config.parseAddr and
// whereabouts' net.IP read it), a prefix masked and, when IPv4-mapped, as
// its IPv4 prefix.
func canonical(kind tenurev1alpha1.ReservationKind, item netip.Prefix) netip.Prefix {
	if kind != tenurev1alpha1.KindDelegatedPrefix {
		a := item.Addr().Unmap()
		return netip.PrefixFrom(a, a.BitLen())
	}
	p := item.Masked()
	if p.Addr().Is4In6() {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// FuzzName holds the reservation name, the lock two agents race on, to its
// contract for every address and prefix of both families and for any
// allocation scope: it is a valid Kubernetes object name, Parse gives back the
// scope label and the item (decode(encode(x)) == x, up to the canonical
// form above), spec.address (ItemString) reads back with ParseItem to the
// item itself, and two items get the same name exactly when they are the
// same item of the same network.
func FuzzName(f *testing.F) {
	ip := func(a string) []byte { return netip.MustParseAddr(a).AsSlice() }
	for _, s := range []struct {
		network string
		item    []byte
	}{
		{"default", append([]byte{0, 32}, ip("10.0.0.1")...)},
		{"san", append([]byte{0, 32}, ip("255.255.255.255")...)},
		{"vm-net", append([]byte{1, 128}, ip("2001:db8::1")...)},
		{"vm-net", append([]byte{4, 56}, ip("2001:db8:100:ab00::")...)},
		{"vm-net", append([]byte{4, 0}, make([]byte, 16)...)},
		{"vm-net", append([]byte{3, 32}, ip("10.1.2.3")...)},
		{"default", append([]byte{2, 128}, ip("10.0.0.1")...)},
		{"default", append([]byte{5, 120}, ip("10.0.0.0")...)},
		{"default", append([]byte{5, 96}, ip("0.0.0.0")...)},
		{"san/10.0.0.0/24", append([]byte{0, 32}, ip("10.0.0.7")...)},
		{"tenant-a/2001:db8::/64", append([]byte{1, 128}, ip("2001:db8::ff")...)},
		{"--", []byte{0}},
		{"", []byte{1}},
		{"Upper_Case.and.dots-that-make-a-long-network-name-over-sixty-three-bytes-long", append([]byte{1, 128}, ip("fe80::1")...)},
	} {
		f.Add(s.network, s.item, s.network, append([]byte{s.item[0] ^ 1}, s.item[1:]...))
	}
	f.Fuzz(func(t *testing.T, netA string, itemA []byte, netB string, itemB []byte) {
		kindA, a := fuzzItem(itemA)
		kindB, b := fuzzItem(itemB)
		nameA := checkName(t, netA, kindA, a)
		nameB := checkName(t, netB, kindB, b)
		sameNet := ScopeLabel(netA) == ScopeLabel(netB)
		if sameNet && netA != netB {
			t.Fatalf("networks %q and %q share the label %q", netA, netB, ScopeLabel(netA))
		}
		isPD := func(k tenurev1alpha1.ReservationKind) bool { return k == tenurev1alpha1.KindDelegatedPrefix }
		same := sameNet && isPD(kindA) == isPD(kindB) && canonical(kindA, a) == canonical(kindB, b)
		if (nameA == nameB) != same {
			t.Fatalf("%s %v on %q is named %q, %s %v on %q is named %q", kindA, a, netA, nameA, kindB, b, netB, nameB)
		}
	})
}

// checkName checks one item's name and spec.address, and returns the name.
func checkName(t *testing.T, network string, kind tenurev1alpha1.ReservationKind, item netip.Prefix) string {
	t.Helper()
	name := Name(network, kind, item)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		t.Fatalf("%s %v on %q: name %q is not a valid object name: %v", kind, item, network, name, errs)
	}
	label := ScopeLabel(network)
	if errs := validation.IsDNS1123Label(label); len(errs) > 0 {
		t.Fatalf("network %q: label %q is not a valid label: %v", network, label, errs)
	}
	if got := ScopeLabelOf(name); got != label {
		t.Fatalf("ScopeLabelOf(%q) = %q, want %q", name, got, label)
	}
	p, err := Parse(name)
	if err != nil {
		t.Fatalf("%s %v on %q: Parse(%q): %v", kind, item, network, name, err)
	}
	want := canonical(kind, item)
	if p.ScopeLabel != label || p.IsPrefix != (kind == tenurev1alpha1.KindDelegatedPrefix) || p.Prefix != want {
		t.Fatalf("%s %v on %q: Parse(%q) = %+v, want label %q, item %v", kind, item, network, name, p, label, want)
	}
	s := ItemString(kind, item)
	back, err := ParseItem(s)
	wantItem := item
	if kind == tenurev1alpha1.KindDelegatedPrefix {
		wantItem = item.Masked()
	}
	if err != nil || back != wantItem {
		t.Fatalf("%s %v: ParseItem(ItemString = %q) = %v, %v", kind, item, s, back, err)
	}
	return name
}
