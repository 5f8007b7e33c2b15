//go:build integration

// Package compat checks that tenure works beside an IPAMClaim CRD installed
// by someone else without status.delegatedPrefixes (the upstream NPWG CRD):
// addresses keep working, and the additive field is simply not stored.
package compat

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

// olderCRD is tenure's IPAMClaim CRD with delegatedPrefixes removed, which
// is what the upstream CRD is.
func olderCRD(t *testing.T) []byte {
	t.Helper()
	b, err := fs.ReadFile(deploy.CRDs, "crds/k8s.cni.cncf.io_ipamclaims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	skipIndent := -1
	for _, line := range strings.Split(string(b), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if skipIndent >= 0 {
			if strings.TrimSpace(line) == "" || indent > skipIndent {
				continue
			}
			skipIndent = -1
		}
		if strings.TrimSpace(line) == "delegatedPrefixes:" {
			skipIndent = indent
			continue
		}
		out = append(out, line)
	}
	s := strings.Join(out, "\n")
	if strings.Contains(s, "delegatedPrefixes:") {
		t.Fatal("could not strip delegatedPrefixes from the CRD")
	}
	return []byte(s)
}

func TestClaimsWorkWithAnOlderCRD(t *testing.T) {
	crd := olderCRD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if err := controlplane.InstallCRDs(ctx, cp.Config, fstest.MapFS{"ipamclaims.yaml": {Data: crd}}); err != nil {
		t.Fatal(err)
	}
	c, err := kube.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	cl := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm1.san"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "san", Interface: "net1"}}
	if err := c.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cl.Status.IPs = []string{"10.0.0.5/24", "fd00::5/64"}
	cl.Status.DelegatedPrefixes = []string{"fd00:100::/56"}
	cl.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm1-a"}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatalf("status update with the additive field against an older CRD: %v", err)
	}
	got := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cl), got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Status.IPs, cl.Status.IPs) || got.Status.OwnerPod == nil {
		t.Fatalf("addresses lost: %+v", got.Status)
	}
	if got.Status.DelegatedPrefixes != nil {
		t.Fatalf("an older CRD cannot store delegatedPrefixes, got %v", got.Status.DelegatedPrefixes)
	}
}
