package admission

import (
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func verify(t *testing.T, m Material, bundle []*x509.Certificate, name string, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range bundle {
		pool.AddCert(c)
	}
	_, err := m.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now})
	return err
}

func TestRenewLifecycle(t *testing.T) {
	names := Names{DNS: []string{"tenure-controller-webhook.tenure-system.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m, changed, err := Renew(Material{}, names, t0, DefaultLifetimes)
	if err != nil || !changed || len(m.CAs) != 1 || m.Cert == nil {
		t.Fatalf("first: changed %v, %d CAs, err %v", changed, len(m.CAs), err)
	}
	if err := verify(t, m, m.CAs, names.DNS[0], t0); err != nil {
		t.Fatalf("the serving certificate does not verify against its bundle: %v", err)
	}
	// Through the Secret and back: nothing is due.
	data, err := m.Data()
	if err != nil {
		t.Fatal(err)
	}
	back := ParseMaterial(data)
	if _, changed, _ := Renew(back, names, t0.Add(time.Hour), DefaultLifetimes); changed {
		t.Fatal("renewed what was not due")
	}
	// The serving certificate is renewed in the last third of its life,
	// by the same CA (the caBundle does not change).
	late := t0.Add(DefaultLifetimes.Serving * 2 / 3).Add(time.Hour)
	m2, changed, err := Renew(back, names, late, DefaultLifetimes)
	if err != nil || !changed || m2.Cert.SerialNumber.Cmp(m.Cert.SerialNumber) == 0 || len(m2.CAs) != 1 || !m2.CAs[0].Equal(m.CAs[0]) {
		t.Fatalf("serving renewal: changed %v, err %v, CAs %d", changed, err, len(m2.CAs))
	}
	// A name more: a new serving certificate.
	more := Names{DNS: append(names.DNS, "other.svc"), IPs: names.IPs}
	if m3, changed, _ := Renew(back, more, t0.Add(time.Hour), DefaultLifetimes); !changed || verify(t, m3, m3.CAs, "other.svc", t0.Add(time.Hour)) != nil {
		t.Fatal("a certificate without a required name was kept")
	}
	// The CA in its last third: a new CA signs, the old stays in the bundle
	// while it is valid, so a certificate it signed still verifies.
	caLate := t0.Add(DefaultLifetimes.CA * 2 / 3).Add(time.Hour)
	m4, changed, err := Renew(back, names, caLate, DefaultLifetimes)
	if err != nil || !changed || len(m4.CAs) != 2 || m4.CAs[0].Equal(m.CAs[0]) || !m4.CAs[1].Equal(m.CAs[0]) {
		t.Fatalf("CA renewal: changed %v, err %v, CAs %d", changed, err, len(m4.CAs))
	}
	if err := verify(t, m4, m4.CAs[:1], names.DNS[0], caLate); err != nil {
		t.Errorf("the new certificate is not the new CA's: %v", err)
	}
	if err := verify(t, back, m4.CAs, names.DNS[0], t0.Add(time.Hour)); err != nil {
		t.Errorf("the old certificate no longer verifies against the new bundle: %v", err)
	}
	// Once the old CA expired it leaves the bundle.
	m5, _, err := Renew(ParseMaterial(must(m4.Data())), names, m.CAs[0].NotAfter.Add(time.Hour), DefaultLifetimes)
	if err != nil || len(m5.CAs) != 1 || !m5.CAs[0].Equal(m4.CAs[0]) {
		t.Fatalf("after the old CA expired: %d CAs, err %v", len(m5.CAs), err)
	}
	// A CA key that does not match the CA (a Secret edited by hand) is
	// replaced.
	broken := back
	broken.CAKey = m4.CAKey
	if m6, changed, _ := Renew(broken, names, t0.Add(time.Hour), DefaultLifetimes); !changed || m6.CAs[0].Equal(m.CAs[0]) {
		t.Fatal("kept a CA whose key is not in the Secret")
	}
}

func must(d map[string][]byte, err error) map[string][]byte {
	if err != nil {
		panic(err)
	}
	return d
}
