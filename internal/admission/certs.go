package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The webhook's TLS is the controller's own: a CA it makes, a serving
// certificate that CA signs, both kept in one Secret of its namespace so
// every replica serves the same, and the CA in the caBundle of the
// webhook configuration. No cert-manager.
//
// Lifetimes: each certificate is renewed once less than a third of its
// life is left. A renewed CA joins the bundle beside the old one, which
// stays there until it expires, so an API server that still holds the old
// bundle, or a replica still serving a certificate of the old CA, keeps
// working through the change.
type Lifetimes struct {
	CA, Serving time.Duration
}

// DefaultLifetimes: a CA for five years, a serving certificate for 90 days.
var DefaultLifetimes = Lifetimes{CA: 5 * 365 * 24 * time.Hour, Serving: 90 * 24 * time.Hour}

// Secret keys.
const (
	KeyCABundle = "ca.crt" // every CA still valid, the current one first (PEM)
	KeyCAKey    = "ca.key" // the current CA's key (PEM, PKCS#8)
	KeyCert     = corev1.TLSCertKey
	KeyKey      = corev1.TLSPrivateKeyKey
)

// Material is what the Secret holds, parsed.
type Material struct {
	CAs     []*x509.Certificate // current first
	CAKey   *ecdsa.PrivateKey
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Names are the names the serving certificate must carry.
type Names struct {
	DNS []string
	IPs []net.IP
}

// ParseMaterial reads a Secret's data; what is missing or unparsable is
// left empty (and so made anew by Renew).
func ParseMaterial(data map[string][]byte) Material {
	var m Material
	rest := data[KeyCABundle]
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && c.IsCA {
			m.CAs = append(m.CAs, c)
		}
	}
	if b, _ := pem.Decode(data[KeyCAKey]); b != nil {
		if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
			if ek, ok := k.(*ecdsa.PrivateKey); ok {
				m.CAKey = ek
			}
		}
	}
	if pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey]); err == nil {
		if c, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
			m.Cert, m.CertPEM, m.KeyPEM = c, data[KeyCert], data[KeyKey]
		}
	}
	return m
}

// Data is the Secret's data for m.
func (m Material) Data() (map[string][]byte, error) {
	var bundle bytes.Buffer
	for _, c := range m.CAs {
		_ = pem.Encode(&bundle, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	der, err := x509.MarshalPKCS8PrivateKey(m.CAKey)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		KeyCABundle: bundle.Bytes(),
		KeyCAKey:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		KeyCert:     m.CertPEM,
		KeyKey:      m.KeyPEM,
	}, nil
}

// Bundle is the caBundle: every CA of m in PEM.
func (m Material) Bundle() []byte {
	var b bytes.Buffer
	for _, c := range m.CAs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func due(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < life/3
}

// Renew returns m with what is due made anew at now: the CA (missing, its
// key not matching, or within the last third of its life), expired CAs
// dropped from the bundle, and the serving certificate (missing, not
// signed by the current CA, not naming names, or due). changed reports
// whether anything was.
func Renew(m Material, names Names, now time.Time, lt Lifetimes) (out Material, changed bool, err error) {
	out = m
	out.CAs = slices.DeleteFunc(slices.Clone(m.CAs), func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) })
	changed = len(out.CAs) != len(m.CAs)
	if len(out.CAs) == 0 || out.CAKey == nil || !out.CAKey.PublicKey.Equal(out.CAs[0].PublicKey) || due(out.CAs[0], now) {
		ca, key, err := newCA(now, lt.CA)
		if err != nil {
			return m, false, err
		}
		out.CAs = append([]*x509.Certificate{ca}, out.CAs...)
		out.CAKey, changed = key, true
	}
	if out.Cert == nil || out.Cert.CheckSignatureFrom(out.CAs[0]) != nil || !names.in(out.Cert) || due(out.Cert, now) {
		out.Cert, out.CertPEM, out.KeyPEM, err = newServing(out.CAs[0], out.CAKey, names, now, lt.Serving)
		if err != nil {
			return m, false, err
		}
		changed = true
	}
	return out, changed, nil
}

func (n Names) in(c *x509.Certificate) bool {
	for _, d := range n.DNS {
		if !slices.Contains(c.DNSNames, d) {
			return false
		}
	}
	for _, ip := range n.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, life time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: fmt.Sprintf("tenure-controller webhook CA %d", now.Unix())},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names Names, now time.Time, life time.Duration) (*x509.Certificate, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, err
	}
	cn := "tenure-controller webhook"
	if len(names.DNS) > 0 {
		cn = names.DNS[0]
	}
	notAfter := now.Add(life)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: cn}, DNSNames: names.DNS, IPAddresses: names.IPs,
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Certs keeps the Secret, the webhook configuration's caBundle and the
// certificate this replica serves in step.
type Certs struct {
	Client        client.Client
	Namespace     string
	Secret        string
	WebhookConfig string // the ValidatingWebhookConfiguration whose caBundle is kept
	Names         Names
	Log           *slog.Logger
	// Lifetimes of new certificates; zero: DefaultLifetimes.
	Lifetimes Lifetimes

	mu      sync.Mutex // one Ensure at a time
	serving atomic.Pointer[tls.Certificate]
}

// GetCertificate is the tls.Config callback: the certificate last loaded.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.serving.Load(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Ensure is one pass: read the Secret, renew what is due, put the new
// bundle in the webhook configuration before the Secret names a
// certificate of a new CA, write the Secret (a conflict: another replica
// renewed, and the next pass reads its), make sure the caBundle is the
// Secret's, and serve its certificate.
func (c *Certs) Ensure(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ensure(ctx)
}

func (c *Certs) ensure(ctx context.Context) error {
	now := time.Now()
	lt := c.Lifetimes
	if lt == (Lifetimes{}) {
		lt = DefaultLifetimes
	}
	sec := &corev1.Secret{}
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Secret}, sec)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, c.Secret, err)
	}
	m := ParseMaterial(sec.Data)
	next, changed, err := Renew(m, c.Names, now, lt)
	if err != nil {
		return err
	}
	if changed {
		// The API server trusts the old and the new CA before any replica
		// serves a certificate of the new one.
		union := next
		for _, old := range m.CAs {
			if !slices.ContainsFunc(union.CAs, old.Equal) && now.Before(old.NotAfter) {
				union.CAs = append(union.CAs, old)
			}
		}
		if err := c.patchBundle(ctx, union.Bundle()); err != nil {
			return err
		}
		data, err := next.Data()
		if err != nil {
			return err
		}
		sec.Data, sec.Type = data, corev1.SecretTypeOpaque
		if exists {
			err = c.Client.Update(ctx, sec)
		} else {
			sec.ObjectMeta = metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Secret,
				Labels: map[string]string{"app.kubernetes.io/name": "tenure-controller", "app.kubernetes.io/component": "webhook"}}
			err = c.Client.Create(ctx, sec)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return c.ensure(ctx) // another replica wrote it first: take theirs
		}
		if err != nil {
			return fmt.Errorf("writing Secret %s/%s: %w", c.Namespace, c.Secret, err)
		}
		if c.Log != nil {
			c.Log.Info("webhook certificate renewed", "secret", c.Namespace+"/"+c.Secret, "notAfter", next.Cert.NotAfter, "ca", next.CAs[0].Subject.CommonName, "cas", len(next.CAs))
		}
	}
	if err := c.patchBundle(ctx, next.Bundle()); err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(next.CertPEM, next.KeyPEM)
	if err != nil {
		return err
	}
	c.serving.Store(&pair)
	return nil
}

// patchBundle sets the caBundle of every webhook of the configuration.
func (c *Certs) patchBundle(ctx context.Context, bundle []byte) error {
	if c.WebhookConfig == "" {
		return nil
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, types.NamespacedName{Name: c.WebhookConfig}, vwc); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", c.WebhookConfig, err)
	}
	orig := vwc.DeepCopy()
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, bundle) {
			vwc.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Client.Patch(ctx, vwc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching the caBundle of ValidatingWebhookConfiguration %s: %w", c.WebhookConfig, err)
	}
	return nil
}

// Run calls Ensure every interval until ctx ends (the first call is the
// caller's), logging failures.
func (c *Certs) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Ensure(ctx); err != nil && c.Log != nil && ctx.Err() == nil {
				c.Log.Warn("keeping the webhook certificate", "err", err)
			}
		}
	}
}
