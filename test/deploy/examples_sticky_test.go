//go:build integration

package deploy_test

import (
	"encoding/json"
	"net/netip"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
)

// TestExampleStickyStatefulSet: the StatefulSet's pods opt in on the
// interface its attachment gives them.
func TestExampleStickyStatefulSet(t *testing.T) {
	_, flat := flatConfig(t, kustomizeBuild(t))
	exs := examples(t)
	c, _ := nadConfig(t, exs, flat, "db-san")
	sts := typed[appsv1.StatefulSet](t, find(t, exs, "StatefulSet", "db"))
	p := &corev1.Pod{ObjectMeta: sts.Spec.Template.ObjectMeta}
	sel, err := claims.Select(p, "net1")
	if err != nil || sel.Element == nil || sel.Element.Name != c.Name {
		t.Fatalf("the template's net1 is %+v (%v), want attachment %s", sel.Element, err, c.Name)
	}
	if want, _ := claims.WantsSticky(p, "net1"); !want {
		t.Errorf("the template's annotations %v do not make net1 sticky", p.Annotations)
	}
}

// TestExampleRequestedAddress: the attachment declares the ips capability,
// and the address the Deployment's pod asks for is one its range hands
// out, as the agent parses it from runtimeConfig.ips.
func TestExampleRequestedAddress(t *testing.T) {
	_, flat := flatConfig(t, kustomizeBuild(t))
	exs := examples(t)
	_, raw := nadConfig(t, exs, flat, "storage-san-static")
	var nad map[string]any
	if err := json.Unmarshal(raw, &nad); err != nil {
		t.Fatal(err)
	}
	if caps, _ := nad["capabilities"].(map[string]any); caps["ips"] != true {
		t.Errorf("capabilities %v: Multus passes ips only to a plugin that declares them", nad["capabilities"])
	}
	d := typed[appsv1.Deployment](t, find(t, exs, "Deployment", "san-gateway"))
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q: a rolling update starts the new pod while the old one holds the address", d.Spec.Strategy.Type)
	}
	sel, err := claims.Select(&corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta}, "net1")
	if err != nil || sel.Element == nil || len(sel.Element.IPRequest) != 1 {
		t.Fatalf("the template's net1 element %+v (%v), want one requested address", sel.Element, err)
	}
	nad["runtimeConfig"] = map[string]any{"ips": sel.Element.IPRequest}
	withIPs, _ := json.Marshal(nad)
	c, err := config.Parse(withIPs, flat)
	if err != nil {
		t.Fatalf("the requested %v: %v", sel.Element.IPRequest, err)
	}
	want := netip.MustParsePrefix(sel.Element.IPRequest[0]).Addr()
	if len(c.Requested) != 1 || c.Requested[0] != want {
		t.Errorf("Requested %v, want %s", c.Requested, want)
	}
}
