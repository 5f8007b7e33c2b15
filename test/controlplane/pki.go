package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// pki is what the API server needs: a CA, a serving certificate signed by
// it, and a service-account signing key pair. ECDSA P-256 keeps generation
// well under a millisecond.
type pki struct {
	caPEM, certPEM, keyPEM []byte
	saKeyPEM, saPubPEM     []byte
	// caKeyPEM signs client certificates: kubelets', the API server's own
	// to its kubelets.
	caKeyPEM []byte
}

// generatePKI makes the certificates; sans are further addresses the
// serving certificate names.
func generatePKI(now time.Time, sans ...net.IP) (*pki, error) {
	notBefore, notAfter := now.Add(-time.Hour), now.Add(365*24*time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "tenure-dev-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	certTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)}, sans...),
	}
	certDER, err := x509.CreateCertificate(rand.Reader, certTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, err
	}

	return &pki{
		caKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKeyDER}),
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		saKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER}),
		saPubPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

// IssueClientCert signs a client certificate for the user cn in the groups
// orgs with the control plane's CA (pki/ca.key, the API server's client
// CA): a kubelet's (system:node:NAME in system:nodes) or the API server's
// own to its kubelets. It returns the certificate and its key, PEM. A
// control plane of cptest has no such key: use UserConfig.
func (cp *ControlPlane) IssueClientCert(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	return issueClientCert(filepath.Join(cp.Dir, "pki"), cn, orgs...)
}

func issueClientCert(pkiDir, cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	caCertPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, nil, err
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: the client CA's key: %w", err)
	}
	cb, _ := pem.Decode(caCertPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("controlplane: %s: no PEM CA certificate and key", pkiDir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// UserConfig returns a client config that authenticates as user in groups
// with a client certificate of the API server's client CA, as a kubelet or
// another component with a certificate of its own does: the API server's
// authorizers and admission see that user, no impersonation. Client side
// rate limiting is off, as in Config.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	if cp.AddUser != nil {
		return cp.AddUser(user, groups...)
	}
	cert, key, err := cp.IssueClientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: cp.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.Config.TLSClientConfig.CAData,
			CertData: cert,
			KeyData:  key,
		},
		QPS:   -1,
		Burst: 1000,
	}, nil
}

// KubeletConfig returns the client config of node's kubelet: user
// system:node:NODE in group system:nodes, which the Node authorizer and
// NodeRestriction hold to node.
func (cp *ControlPlane) KubeletConfig(node string) (*rest.Config, error) {
	return cp.UserConfig(NodeUser(node), NodesGroup)
}

// NodesGroup is the group of every kubelet.
const NodesGroup = "system:nodes"

// NodeUser is the user name of node's kubelet.
func NodeUser(node string) string { return "system:node:" + node }
