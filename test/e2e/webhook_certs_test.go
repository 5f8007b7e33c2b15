//go:build integration

package e2e

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The webhook's TLS over its life, with the real API server as the client:
// a CA and serving certificate in the last third of their lives are
// renewed, the new CA joins the old in the caBundle, and the webhook stays
// in force; a caBundle emptied (a configuration re-applied) is written
// again.
func TestWebhookCertificateRotation(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	admin := apiClient(t)
	a := newNodeAgent(t, ctx, "rot-a")
	certs := agentWebhook.Certs
	inForce := func(when string) {
		t.Helper()
		probe := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.AgentNamespace, Name: "rotation-probe"},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "probe", Interface: "net1"}}
		err := a.c.Create(ctx, probe, client.DryRunAll)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), testbed.AgentWebhookName) || !strings.Contains(err.Error(), "["+admission.RuleClaimCreateSticky+"]") {
			t.Fatalf("%s: the webhook is not in force: %v", when, err)
		}
	}
	secret := func() *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: certs.Namespace, Name: certs.Secret}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	bundle := func() []byte {
		t.Helper()
		return webhookConfigObject(t, ctx).Webhooks[0].ClientConfig.CABundle
	}
	inForce("at the start")

	// A Secret as after most of a (short) life: made 2.5 h ago, for 3 h.
	old, _, err := admission.Renew(admission.Material{}, certs.Names, time.Now().Add(-150*time.Minute), admission.Lifetimes{CA: 3 * time.Hour, Serving: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	data, err := old.Data()
	if err != nil {
		t.Fatal(err)
	}
	s := secret()
	s.Data = data
	if err := admin.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	m := admission.ParseMaterial(secret().Data)
	if len(m.CAs) != 2 || m.CAs[0].Equal(old.CAs[0]) || !m.CAs[1].Equal(old.CAs[0]) {
		t.Fatalf("after renewal the Secret's bundle has %d CAs (want the new one, then the old)", len(m.CAs))
	}
	if err := m.Cert.CheckSignatureFrom(m.CAs[0]); err != nil {
		t.Errorf("the new serving certificate is not the new CA's: %v", err)
	}
	if m.Cert.NotAfter.Sub(m.Cert.NotBefore) < 24*time.Hour || m.CAs[0].NotAfter.Before(time.Now().Add(365*24*time.Hour)) {
		t.Errorf("renewed with the lifetimes of the old: serving until %v, CA until %v", m.Cert.NotAfter, m.CAs[0].NotAfter)
	}
	if !bytes.Equal(bundle(), m.Bundle()) {
		t.Error("the caBundle is not the Secret's bundle")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle())
	if _, err := old.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: certs.Names.DNS[0]}); err != nil {
		t.Errorf("a replica still serving the old certificate is no longer trusted: %v", err)
	}
	inForce("after the CA's renewal")

	// A configuration re-applied without caBundle: the next pass writes it.
	vwc := webhookConfigObject(t, ctx)
	orig := vwc.DeepCopy()
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := admin.Patch(ctx, vwc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if got := bundle(); len(got) != 0 {
		t.Fatal("the caBundle was not emptied")
	}
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bundle(), m.Bundle()) {
		t.Error("the emptied caBundle was not written again")
	}
	inForce("after the caBundle was written again")
}
