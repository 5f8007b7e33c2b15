package dataplane

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-ipam/tenure/internal/kubevirt"
)

// TestASwitchedOverSourceNamesThePrefixThatLeftIt: the source node's
// launcher pod, no longer served once its VM switched over to another
// node, names the claim's delegated prefix as switched away; nothing else
// does (a migration under way, a failed one, the target, a VM that simply
// runs elsewhere).
func TestASwitchedOverSourceNamesThePrefixThatLeftIt(t *testing.T) {
	const prefix = "fd00:9000:0:700::/56"
	claim := testClaim("vm1.san", "san", "virt-launcher-src", []string{"fd00::7/64"}, []string{prefix})
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "u1"}}
	ready := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	vmi := func(node string, m *kubevirt.Migration) kubevirt.Lookup {
		return func(ns, name string) (kubevirt.VMI, bool) {
			return kubevirt.VMI{Namespace: ns, Name: name, NodeName: node, Migration: m}, ns == "vms" && name == "vm1"
		}
	}
	pod := func(node string) *corev1.Pod {
		p := testPod("virt-launcher-"+node, map[string]string{nets: `[{"name":"san","interface":"net1","ipam-claim-reference":"vm1.san","mac":"` + vmMAC + `"}]`})
		p.Spec.NodeName = node
		return p
	}
	cases := []struct {
		name string
		vmi  kubevirt.Lookup
		node string
		want string // the prefix switched away, "" for none
	}{
		{"source after the target's domain is ready", vmi("n1", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", DomainReady: ready}), "n1", prefix},
		{"source after completed, nodeName moved", vmi("n2", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", Completed: true}), "n1", prefix},
		{"source of a migration with no sourceNode recorded", vmi("n1", &kubevirt.Migration{TargetNode: "n2", DomainReady: ready}), "n1", prefix},
		{"target after the switchover: it serves", vmi("n1", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", DomainReady: ready}), "n2", ""},
		{"source while the migration is under way: it serves", vmi("n1", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2"}), "n1", ""},
		{"target of a failed migration", vmi("n1", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", DomainReady: ready, Failed: true, Completed: true}), "n2", ""},
		{"a node the VM runs elsewhere of, with no migration", vmi("n2", nil), "n1", ""},
		{"a third node, not the migration's source", vmi("n1", &kubevirt.Migration{SourceNode: "n1", TargetNode: "n2", DomainReady: ready}), "n3", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, skips := Compute(Inputs{Pods: []*corev1.Pod{pod(c.node)}, Claim: claimSource(claim), Networks: san, VMI: c.vmi})
			var got string
			for _, k := range skips {
				if k.SwitchedAway.IsValid() {
					got = k.SwitchedAway.String()
				}
			}
			if got != c.want {
				t.Errorf("switched away %q, want %q (skips %+v)", got, c.want, skips)
			}
		})
	}
}

// TestTheSourceKeepsASwitchedAwayRouteForTheOverlap: a prefix whose
// VM switched over to another node keeps its route here for RouteOverlap
// from when the switchover was first seen, so the segment's router never
// meets a gap between this route's withdrawal and the target's; then it
// goes. A route whose binding left for any other reason goes at once.
func TestTheSourceKeepsASwitchedAwayRouteForTheOverlap(t *testing.T) {
	s, ip := routingService(t, "ho", "br0")
	routes := func() string { return ip("-6", "route", "show", "proto", "116") }
	moved := binding("vms/vm1.san", "fd00::7", "fd00:9000:0:700::/56", true, "br0")
	gone := binding("vms/vm2.san", "fd00::8", "fd00:9000:0:800::/56", true, "br0")
	s.reconcileRoutes([]Binding{moved, gone})
	if got := routes(); !strings.Contains(got, "fd00:9000:0:700::/56") || !strings.Contains(got, "fd00:9000:0:800::/56") {
		t.Fatalf("routes %q", got)
	}
	if s.overlapDue() != nil {
		t.Fatal("an overlap is due with none under way")
	}

	// vm1 switched over to another node; vm2's pod went.
	seen := time.Now()
	s.overlap([]Skip{{Pod: "vms/virt-launcher-src", Claim: "vms/vm1.san", Reason: "VirtualMachineInstance vms/vm1 runs on node n2", SwitchedAway: moved.Prefix}}, seen)
	s.reconcileRoutes(nil)
	got := routes()
	if !strings.Contains(got, "fd00:9000:0:700::/56 via fd00::7 dev br0") {
		t.Errorf("the switched-away route went during its overlap: %q", got)
	}
	if strings.Contains(got, "fd00:9000:0:800::/56") {
		t.Errorf("a route whose pod went was kept: %q", got)
	}
	if s.routesLeft != 1 {
		t.Errorf("routesLeft %d during the overlap, want 1 (the node is not idle)", s.routesLeft)
	}
	if s.overlapDue() == nil {
		t.Error("no wake-up for the overlap's end")
	}
	// Seen again (the source pod still there): the overlap keeps its end.
	s.overlap([]Skip{{SwitchedAway: moved.Prefix}}, seen.Add(RouteOverlap/2))
	if until := s.overlaps[moved.Prefix.Masked()]; !until.Equal(seen.Add(RouteOverlap)) {
		t.Errorf("overlap ends %v, want %v", until, seen.Add(RouteOverlap))
	}

	// The overlap's end: the route goes, whether the pod is there or not.
	s.overlap([]Skip{{SwitchedAway: moved.Prefix}}, seen.Add(RouteOverlap))
	s.reconcileRoutes(nil)
	if got := routes(); got != "" {
		t.Errorf("routes after the overlap ended: %q", got)
	}
	if s.overlapDue() != nil || s.routesLeft != 0 {
		t.Errorf("after the overlap: due %v, routesLeft %d", s.overlapDue() != nil, s.routesLeft)
	}

	// A migration back within the overlap: the route is wanted again and
	// stays whatever the overlap says.
	s.reconcileRoutes([]Binding{moved})
	s.overlap([]Skip{{SwitchedAway: moved.Prefix}}, time.Now())
	s.reconcileRoutes([]Binding{moved})
	if got := routes(); !strings.Contains(got, "fd00:9000:0:700::/56 via fd00::7 dev br0") {
		t.Errorf("a wanted route during an overlap: %q", got)
	}
}
