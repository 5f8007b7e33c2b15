//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The attack matrix: an agent of node A, with a token bound to its agent
// pod there, sends every write the agent's RBAC could let through (and the
// ones it does not) against what belongs to node B, with the node
// restriction in force (deploy/policy's CEL and deploy/webhook's webhook).
// Each must be refused, naming its rule ("rbac" for RBAC's refusals); A's
// writes to its own objects must be allowed. The rows are sent as raw
// requests so every verb goes over the wire as a client would send it.

type attack struct {
	target, resource, verb, what string
	method, path, contentType    string
	params                       [][2]string // query parameters
	body                         any
	rule                         string // "" = must be allowed
}

func send(ctx context.Context, rc rest.Interface, a attack) error {
	req := rc.Verb(a.method).AbsPath(a.path)
	for _, p := range a.params {
		req = req.Param(p[0], p[1])
	}
	if a.body != nil {
		b, err := json.Marshal(a.body)
		if err != nil {
			return err
		}
		ct := a.contentType
		if ct == "" {
			ct = "application/json"
		}
		req = req.SetHeader("Content-Type", ct).Body(b)
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		// The refusal's Status, as a client decodes it.
		st := &metav1.Status{}
		if json.Unmarshal(body, st) == nil && st.Kind == "Status" {
			return apierrors.FromObject(st)
		}
	}
	return err
}

func TestAgentAttackMatrix(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	admin := apiClient(t)
	const ns, network = "am", "am-net"
	if err := testbed.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	a, b := newNodeAgent(t, ctx, "am-a"), newNodeAgent(t, ctx, "am-b")
	cs, err := kubernetes.NewForConfig(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc := cs.CoreV1().RESTClient()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("setup: %s: %v", what, err)
		}
	}

	// Node B's objects, written by B's agent where the agent writes them.
	podB, err := testbed.CreatePod(ctx, admin, ns, "web-b", b.node, nil)
	must("pod on B", err)
	resB := heldFor(b.node, network, "10.90.0.1", nil, podB.Name)
	resB.Spec.Owner.Namespace, resB.Spec.Owner.UID, resB.Spec.Owner.PodUID = ns, string(podB.UID), string(podB.UID)
	resB = reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.90.0.1/32"), Range: "10.90.0.0/24", Owner: resB.Spec.Owner})
	must("B reserves for its pod", b.c.Create(ctx, resB))

	claimB := createClaim(t, ctx, admin, ns, "vm-b", network)
	presentOn(t, ctx, b.node, "launcher-b", claimB)
	resClaimB := heldFor(b.node, network, "10.90.0.2", claimB, "launcher-b")
	must("B reserves for its VM's claim", b.c.Create(ctx, resClaimB))
	claimB = getClaim(t, ctx, admin, ns, claimB.Name)
	claimB.Status.IPs, claimB.Status.OwnerPod = []string{"10.90.0.2/24"}, &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-b"}
	must("B records its VM's claim", b.c.Status().Update(ctx, claimB))

	unused := createClaim(t, ctx, admin, ns, "vm-unused", network)

	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	must("StatefulSet", admin.Create(ctx, sts))
	stsPod := func(name, node string) *corev1.Pod {
		yes := true
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{claims.StickyAnnotation: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		must("StatefulSet pod "+name, admin.Create(ctx, p))
		return p
	}
	stsRef := func(p *corev1.Pod) metav1.OwnerReference { return *metav1.GetControllerOf(p) }
	db0 := stsPod("db-0", b.node)
	stickyB := claims.NewStickyClaim(db0, "net1", network, stsRef(db0))
	must("B creates its pod's sticky claim", b.c.Create(ctx, stickyB))
	db2 := stsPod("db-2", b.node)

	evB := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev-b"}, InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: podB.Name, UID: podB.UID},
		Reason: "AddFailed", Message: "B's own", Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "tenure-agent", Host: b.node}}
	must("B records an Event on its pod", b.c.Create(ctx, evB))

	// Node A's objects.
	podA, err := testbed.CreatePod(ctx, admin, ns, "web-a", a.node, nil)
	must("pod on A", err)
	claimA := createClaim(t, ctx, admin, ns, "vm-a", network)
	presentOn(t, ctx, a.node, "launcher-a", claimA)
	db1 := stsPod("db-1", a.node)

	// Hole 2's VM: its first ADD on A reserved and recorded; then it moved
	// to B.
	moved := createClaim(t, ctx, admin, ns, "vm-moved", network)
	presentOn(t, ctx, a.node, "launcher-m-a", moved)
	resMoved := heldFor(a.node, network, "10.90.0.3", moved, "launcher-m-a")
	must("A's first ADD of the VM reserves", a.c.Create(ctx, resMoved))
	moved = getClaim(t, ctx, admin, ns, moved.Name)
	moved.Status.IPs, moved.Status.OwnerPod = []string{"10.90.0.3/24"}, &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-m-a"}
	must("A records the VM's claim", a.c.Status().Update(ctx, moved))
	must("the VM leaves A", testbed.ForceDeletePod(ctx, admin, ns, "launcher-m-a"))
	presentOn(t, ctx, b.node, "launcher-m-b", moved)
	moved = getClaim(t, ctx, admin, ns, moved.Name)
	moved.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-m-b"}
	must("B takes the VM's claim", b.c.Status().Update(ctx, moved))

	// What a root on A can write besides its agent's requests: a mirror
	// pod (the kubelet's) naming B's VM's claim.
	mirrorA := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "static-a",
		Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "a1b2", "k8s.v1.cni.cncf.io/networks": vmAnnotations(network, claimB.Name)["k8s.v1.cni.cncf.io/networks"]}},
		Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	must("A's kubelet's mirror pod naming B's VM's claim", admin.Create(ctx, mirrorA))
	// A claim a pod of A and a pod of B present (no VMI decides between
	// them), recorded by B: IPv4 then IPv6. A holds an address for it too.
	shared := createClaim(t, ctx, admin, ns, "vm-shared", network)
	presentOn(t, ctx, b.node, "shared-b", shared)
	presentOn(t, ctx, a.node, "shared-a", shared)
	mirrorShared := mirrorA.DeepCopy()
	mirrorShared.Name, mirrorShared.ResourceVersion, mirrorShared.UID = "static-shared-a", "", ""
	mirrorShared.Annotations["k8s.v1.cni.cncf.io/networks"] = vmAnnotations(network, shared.Name)["k8s.v1.cni.cncf.io/networks"]
	must("A's kubelet's mirror pod naming the shared claim", admin.Create(ctx, mirrorShared))
	sharedV4, sharedV6 := heldFor(b.node, network, "10.90.0.40", shared, "shared-b"), heldFor(b.node, network, "fd00:90::40", shared, "shared-b")
	must("B reserves the shared claim's IPv4 address", b.c.Create(ctx, sharedV4))
	must("B reserves the shared claim's IPv6 address", b.c.Create(ctx, sharedV6))
	sharedA := heldFor(a.node, network, "10.90.0.41", shared, "shared-a")
	must("A reserves for the shared claim", a.c.Create(ctx, sharedA))
	must("B records the shared claim", updateStatusFresh(ctx, admin, b.c, ns, shared.Name, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
		s.IPs, s.OwnerPod = []string{"10.90.0.40/24", "fd00:90::40/64"}, &ipamclaimsv1alpha1.OwnerPod{Name: "shared-b"}
	}))
	sharedBefore := claimStateOf(t, ctx, admin, ns, shared.Name)
	claimBBefore := claimStateOf(t, ctx, admin, ns, claimB.Name)

	// A probe request, as the controller makes one before a NodeNotReady
	// release of B's pod's address, that node C's agent answered: the
	// address answers.
	c := newNodeAgent(t, ctx, "am-c")
	probeB := &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: resB.Name},
		Spec: tenurev1alpha1.IPProbeSpec{Network: network, Address: resB.Spec.Address, Node: b.node, AskedAt: metav1.Now()}}
	must("the controller asks", admin.Create(ctx, probeB))
	answerOf := func(node string, result tenurev1alpha1.ProbeResult, mac string) map[string]any {
		return map[string]any{"node": node, "observedGeneration": probeB.Generation, "probedAt": metav1.Now(), "result": result, "mac": mac, "interface": "san0"}
	}
	applyAnswer := func(ans map[string]any) map[string]any {
		return map[string]any{"apiVersion": tenurev1alpha1.GroupVersion.String(), "kind": "IPProbe", "metadata": map[string]any{"name": probeB.Name},
			"status": map[string]any{"answers": []any{ans}}}
	}
	cAnswer := applyAnswer(answerOf(c.node, tenurev1alpha1.ProbeAnswered, "02:00:00:00:0c:01"))
	cBody, err := json.Marshal(cAnswer)
	must("C's answer", err)
	must("C answers", c.c.Status().Patch(ctx, &tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: probeB.Name}},
		client.RawPatch(types.ApplyPatchType, cBody), client.FieldOwner("tenure-agent/"+c.node), client.ForceOwnership))
	probeBefore := &tenurev1alpha1.IPProbe{}
	must("read the answered request", admin.Get(ctx, client.ObjectKey{Name: probeB.Name}, probeBefore))

	// Bodies.
	rsv := func(r *tenurev1alpha1.IPReservation) *tenurev1alpha1.IPReservation {
		r = r.DeepCopy()
		r.APIVersion, r.Kind = tenurev1alpha1.GroupVersion.String(), "IPReservation"
		return r
	}
	clm := func(c *ipamclaimsv1alpha1.IPAMClaim) *ipamclaimsv1alpha1.IPAMClaim {
		c = c.DeepCopy()
		c.APIVersion, c.Kind = ipamclaimsv1alpha1.GroupVersion.String(), "IPAMClaim"
		return c
	}
	status := func(c *ipamclaimsv1alpha1.IPAMClaim, change func(*ipamclaimsv1alpha1.IPAMClaimStatus)) func() any {
		return func() any {
			cur := clm(getClaim(t, ctx, admin, c.Namespace, c.Name))
			change(&cur.Status)
			return cur
		}
	}
	event := func(name string, about corev1.ObjectReference) *corev1.Event {
		return &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			InvolvedObject: about, Reason: "Forged", Message: "forged", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "tenure-agent", Host: a.node}}
	}
	podRef := func(p *corev1.Pod) corev1.ObjectReference {
		return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	}
	claimRef := func(c *ipamclaimsv1alpha1.IPAMClaim) corev1.ObjectReference {
		return corev1.ObjectReference{APIVersion: ipamclaimsv1alpha1.GroupVersion.String(), Kind: "IPAMClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	}
	claimHeld := func(node, addr string, c *ipamclaimsv1alpha1.IPAMClaim, pod string) *tenurev1alpha1.IPReservation {
		return rsv(heldFor(node, network, addr, c, pod))
	}
	const (
		probesPath = "/apis/ipam.tenure.dev/v1alpha1/ipprobes"
		apply      = "application/apply-patch+yaml"
		resPath    = "/apis/ipam.tenure.dev/v1alpha1/ipreservations"
		claimsPath = "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/" + ns + "/ipamclaims"
		eventsPath = "/api/v1/namespaces/" + ns + "/events"
		podsPath   = "/api/v1/namespaces/" + ns + "/pods"
		merge      = "application/merge-patch+json"
		jsonPatch  = "application/json-patch+json"
	)
	jp := func(path string, v any) []map[string]any {
		return []map[string]any{{"op": "replace", "path": path, "value": v}}
	}
	ownOwn := heldFor(a.node, network, "10.90.0.10", nil, podA.Name)
	ownOwn.Spec.Owner.Namespace, ownOwn.Spec.Owner.UID, ownOwn.Spec.Owner.PodUID = ns, string(podA.UID), string(podA.UID)
	ownRes := rsv(reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.90.0.10/32"), Range: "10.90.0.0/24", Owner: ownOwn.Spec.Owner}))
	// A reservation of A's pod at addr that carries c's UID as its owner label.
	labelledAs := func(r *tenurev1alpha1.IPReservation, addr string, c *ipamclaimsv1alpha1.IPAMClaim) *tenurev1alpha1.IPReservation {
		a := netip.MustParseAddr(addr)
		l := rsv(reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(a, a.BitLen()), Range: "10.90.0.0/24", Owner: r.Spec.Owner}))
		l.Labels[reservation.LabelOwnerUID] = string(c.UID)
		return l
	}
	// Items 1, 4 and 5 of issue 42: reservations shaped as an agent writes
	// them (reservation.New) unless the row is about the shape.
	podOwned := func(addr string, o tenurev1alpha1.ReservationOwner) *tenurev1alpha1.IPReservation {
		return rsv(reservation.New(reservation.Spec{Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix(addr + "/32"), Range: "10.90.0.0/24", Owner: o}))
	}
	decoyOwner := resB.Spec.Owner
	decoyOwner.ContainerID, decoyOwner.Node = "ffff", a.node
	decoyOfB := podOwned("10.90.0.60", decoyOwner)
	withClaimUID := ownOwn.Spec.Owner
	withClaimUID.UID, withClaimUID.PodUID = string(claimB.UID), string(claimB.UID)
	podResWithClaimUID := podOwned("10.90.0.61", withClaimUID)
	summaryClaimKind := podOwned("10.90.0.62", ownOwn.Spec.Owner)
	summaryClaimKind.Annotations[reservation.AnnotationSpecSummary] = strings.Replace(summaryClaimKind.Annotations[reservation.AnnotationSpecSummary], "kind=Pod", "kind=IPAMClaim", 1)
	lockOfAnother := podOwned("10.90.0.63", ownOwn.Spec.Owner)
	lockOfAnother.Spec.Address = resB.Spec.Address
	summaryOfB := podOwned("10.90.0.64", ownOwn.Spec.Owner)
	summaryOfB.Annotations[reservation.AnnotationSpecSummary] = reservation.EncodeSpecSummary(&resB.Spec)
	unconfigured := rsv(reservation.New(reservation.Spec{Network: "am-nowhere", Kind: tenurev1alpha1.KindAddress, Item: netip.MustParsePrefix("10.90.0.65/32"), Range: "10.90.0.0/24", Owner: ownOwn.Spec.Owner}))
	claimARes := claimHeld(a.node, "10.90.0.11", claimA, "launcher-a")
	rollbackRes := claimHeld(a.node, "10.90.0.12", claimA, "launcher-a")
	lease := map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": map[string]any{"name": b.node, "namespace": "kube-node-lease"}}
	vmi := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": map[string]any{"name": "vm-b", "namespace": ns}}
	nodeObj := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": b.node}}
	podObj := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": podB.Name, "namespace": ns}}
	labels := map[string]any{"metadata": map[string]any{"labels": map[string]any{"x": "y"}}}

	type row struct {
		attack
		bodyFn func() any // a body read at send time (a status update's resourceVersion)
	}
	R := func(target, resource, verb, what, method, path, ct string, body any, rule string) row {
		return row{attack: attack{target: target, resource: resource, verb: verb, what: what, method: method, path: path, contentType: ct, body: body, rule: rule}}
	}
	S := func(target, what string, c *ipamclaimsv1alpha1.IPAMClaim, change func(*ipamclaimsv1alpha1.IPAMClaimStatus), rule string) row {
		r := R(target, "ipamclaims/status", "update", what, http.MethodPut, claimsPath+"/"+c.Name+"/status", "", nil, rule)
		r.bodyFn = status(c, change)
		return r
	}
	const probeTarget = "probe request of B's pod's address"
	// P applies an answer to probeB's status as an agent does (its field
	// manager, forced).
	P := func(what string, body any, rule string) row {
		r := R(probeTarget, "ipprobes/status", "patch (apply)", what, http.MethodPatch, "/apis/ipam.tenure.dev/v1alpha1/ipprobes/"+probeB.Name+"/status", apply, body, rule)
		r.params = [][2]string{{"fieldManager", "tenure-agent/" + a.node}, {"force", "true"}}
		return r
	}
	probeObj := func(p *tenurev1alpha1.IPProbe) *tenurev1alpha1.IPProbe {
		p = p.DeepCopy()
		p.APIVersion, p.Kind = tenurev1alpha1.GroupVersion.String(), "IPProbe"
		p.Spec.AskedAt = metav1.Now()
		return p
	}
	probeStatus := func(what string, change func([]tenurev1alpha1.IPProbeAnswer) []tenurev1alpha1.IPProbeAnswer, rule string) row {
		r := R(probeTarget, "ipprobes/status", "update", what, http.MethodPut, "/apis/ipam.tenure.dev/v1alpha1/ipprobes/"+probeB.Name+"/status", "", nil, rule)
		r.bodyFn = func() any {
			cur := &tenurev1alpha1.IPProbe{}
			if err := admin.Get(ctx, client.ObjectKey{Name: probeB.Name}, cur); err != nil {
				t.Fatal(err)
			}
			cur = probeObj(cur)
			cur.Status.Answers = change(cur.Status.Answers)
			return cur
		}
		return r
	}
	rows := []row{
		// Reservations.
		R("B's pod's reservation", "ipreservations", "create", "reserve an address as node B", http.MethodPost, resPath, "", claimHeld(b.node, "10.90.0.20", nil, podB.Name), "reservation-create-own-node"),
		R("claim of B's VM", "ipreservations", "create", "hole 3: reserve for B's VM's claim as itself", http.MethodPost, resPath, "", claimHeld(a.node, "10.90.0.21", claimB, "launcher-b"), "reservation-claim-presented"),
		R("claim not yet used", "ipreservations", "create", "hole 3: reserve for a claim no pod uses", http.MethodPost, resPath, "", claimHeld(a.node, "10.90.0.22", unused, "launcher-a"), "reservation-claim-presented"),
		R("sticky claim of B's pod", "ipreservations", "create", "hole 3: reserve for B's sticky claim", http.MethodPost, resPath, "", claimHeld(a.node, "10.90.0.23", stickyB, db0.Name), "reservation-claim-presented"),
		R("claim of B's VM", "ipreservations", "create", "hole 4: its pod's address labelled as B's VM's claim's", http.MethodPost, resPath, "", labelledAs(ownRes, "10.90.0.24", claimB), "reservation-owner-label"),
		R("B's pod's reservation", "ipreservations", "update", "rewrite B's reservation", http.MethodPut, resPath+"/"+resB.Name, "", rsv(resB), "rbac"),
		R("B's pod's reservation", "ipreservations", "patch (merge)", "relabel B's reservation", http.MethodPatch, resPath+"/"+resB.Name, merge, labels, "rbac"),
		R("B's pod's reservation", "ipreservations", "patch (JSON)", "re-own B's reservation", http.MethodPatch, resPath+"/"+resB.Name, jsonPatch, jp("/spec/owner/node", a.node), "rbac"),
		R("B's pod's reservation", "ipreservations", "delete", "release B's pod's address", http.MethodDelete, resPath+"/"+resB.Name, "", nil, "reservation-delete-own-node"),
		R("claim of B's VM", "ipreservations", "delete", "release B's VM's address", http.MethodDelete, resPath+"/"+resClaimB.Name, "", nil, "reservation-delete-claim-owned"),
		R("claim of the VM that moved to B", "ipreservations", "delete", "hole 2: release what its first ADD reserved", http.MethodDelete, resPath+"/"+resMoved.Name, "", nil, "reservation-delete-claim-rollback"),
		R("every reservation", "ipreservations", "deletecollection", "release everything", http.MethodDelete, resPath, "", nil, "rbac"),
		// Claims.
		R("claim not yet used", "ipamclaims", "create", "hole 5: take a KubeVirt claim's name", http.MethodPost, claimsPath, "", clm(&ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-next"}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: "net1"}}), "claim-create-sticky"),
		R("sticky claim of B's pod", "ipamclaims", "create", "hole 5: take B's StatefulSet pod's sticky claim", http.MethodPost, claimsPath, "", clm(claims.NewStickyClaim(db2, "net1", network, stsRef(db2))), "claim-create-sticky"),
		R("claim of B's VM", "ipamclaims", "update", "rewrite B's VM's claim", http.MethodPut, claimsPath+"/"+claimB.Name, "", clm(claimB), "rbac"),
		R("claim of B's VM", "ipamclaims", "patch (merge)", "relabel B's VM's claim", http.MethodPatch, claimsPath+"/"+claimB.Name, merge, labels, "rbac"),
		R("claim of B's VM", "ipamclaims", "patch (JSON)", "change B's VM's claim's network", http.MethodPatch, claimsPath+"/"+claimB.Name, jsonPatch, jp("/spec/network", "other"), "rbac"),
		R("claim of B's VM", "ipamclaims", "delete", "delete B's VM's claim", http.MethodDelete, claimsPath+"/"+claimB.Name, "", nil, "rbac"),
		R("every claim", "ipamclaims", "deletecollection", "delete every claim", http.MethodDelete, claimsPath, "", nil, "rbac"),
		// Claim status.
		S("claim of B's VM", "hole 1: point ownerPod at A's pod", claimB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-a"}
		}, "claim-status-presented"),
		S("claim of B's VM", "hole 1: point ownerPod at no pod", claimB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "nobody"} }, "claim-status-presented"),
		S("claim of B's VM", "hole 4: add an address to B's VM's claim", claimB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append(s.IPs, "10.90.0.30/24") }, "claim-status-presented"),
		S("claim not yet used", "hole 4: fill an unused claim", unused, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.IPs, s.DelegatedPrefixes = []string{"10.90.0.31/24"}, []string{"fd00:90:0:100::/56"}
		}, "claim-status-presented"),
		S("sticky claim of B's pod", "hole 4: fill B's sticky claim", stickyB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = []string{"10.90.0.32/24"} }, "claim-status-presented"),
		S("claim of A's VM", "hole 4: record in its own claim what no reservation of it holds", claimA, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = []string{"10.90.0.2/24"} }, "claim-status-items-owned"),
		R("claim of B's VM", "ipamclaims/status", "patch (merge)", "point ownerPod at A's pod", http.MethodPatch, claimsPath+"/"+claimB.Name+"/status", merge, map[string]any{"status": map[string]any{"ownerPod": map[string]any{"name": "launcher-a"}}}, "rbac"),
		R("claim of B's VM", "ipamclaims/status", "patch (JSON)", "point ownerPod at A's pod", http.MethodPatch, claimsPath+"/"+claimB.Name+"/status", jsonPatch, jp("/status/ownerPod", map[string]any{"name": "launcher-a"}), "rbac"),
		// Events.
		R("events about B's pods", "events", "create", "hole 6: an Event about B's pod", http.MethodPost, eventsPath, "", event("forged-pod", podRef(podB)), "event-subject"),
		R("claim of B's VM", "events", "create", "hole 6: an Event about B's VM's claim", http.MethodPost, eventsPath, "", event("forged-claim", claimRef(claimB)), "event-subject"),
		R("sticky claim of B's pod", "events", "create", "hole 6: an Event about B's sticky claim", http.MethodPost, eventsPath, "", event("forged-sticky", claimRef(stickyB)), "event-subject"),
		R("events about B's pods", "events", "patch (merge)", "hole 6: rewrite B's Event", http.MethodPatch, eventsPath+"/"+evB.Name, merge, map[string]any{"message": "forged"}, "event-subject"),
		R("events about B's pods", "events", "patch (JSON)", "hole 6: move B's Event onto A's pod", http.MethodPatch, eventsPath+"/"+evB.Name, jsonPatch, jp("/involvedObject", podRef(podA)), "event-subject"),
		R("events about B's pods", "events", "update", "rewrite B's Event", http.MethodPut, eventsPath+"/"+evB.Name, "", event(evB.Name, podRef(podB)), "rbac"),
		R("events about B's pods", "events", "delete", "delete B's Event", http.MethodDelete, eventsPath+"/"+evB.Name, "", nil, "rbac"),
		R("events about B's pods", "events", "deletecollection", "delete every Event", http.MethodDelete, eventsPath, "", nil, "rbac"),
		R("events about B's pods", "events.k8s.io events", "create", "an events.k8s.io Event about B's pod", http.MethodPost, "/apis/events.k8s.io/v1/namespaces/"+ns+"/events", "",
			map[string]any{"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": map[string]any{"name": "forged-v1", "namespace": ns}, "regarding": podRef(podB),
				"reason": "Forged", "note": "forged", "type": "Normal", "action": "Forged", "reportingController": "tenure-agent", "reportingInstance": a.node, "eventTime": metav1.NowMicro()}, "rbac"),
		// Pods, nodes, leases, VMIs: read only or nothing.
		R("B's pod", "pods", "create", "a pod on B", http.MethodPost, podsPath, "", podObj, "rbac"),
		R("B's pod", "pods", "update", "rewrite B's pod", http.MethodPut, podsPath+"/"+podB.Name, "", podObj, "rbac"),
		R("B's pod", "pods", "patch (merge)", "re-annotate B's pod", http.MethodPatch, podsPath+"/"+podB.Name, merge, labels, "rbac"),
		R("B's pod", "pods", "patch (JSON)", "re-annotate B's pod", http.MethodPatch, podsPath+"/"+podB.Name, jsonPatch, jp("/metadata/labels", map[string]any{"x": "y"}), "rbac"),
		R("B's pod", "pods", "delete", "delete B's pod", http.MethodDelete, podsPath+"/"+podB.Name, "", nil, "rbac"),
		R("B's pod", "pods", "deletecollection", "delete every pod", http.MethodDelete, podsPath, "", nil, "rbac"),
		R("node B", "nodes", "create", "register node B", http.MethodPost, "/api/v1/nodes", "", nodeObj, "rbac"),
		R("node B", "nodes", "update", "rewrite node B", http.MethodPut, "/api/v1/nodes/"+b.node, "", nodeObj, "rbac"),
		R("node B", "nodes", "patch (merge)", "relabel node B", http.MethodPatch, "/api/v1/nodes/"+b.node, merge, labels, "rbac"),
		R("node B", "nodes", "patch (JSON)", "relabel node B", http.MethodPatch, "/api/v1/nodes/"+b.node, jsonPatch, jp("/metadata/labels", map[string]any{"x": "y"}), "rbac"),
		R("node B", "nodes/status", "update", "mark node B NotReady", http.MethodPut, "/api/v1/nodes/"+b.node+"/status", "", nodeObj, "rbac"),
		R("node B", "nodes", "delete", "delete node B", http.MethodDelete, "/api/v1/nodes/"+b.node, "", nil, "rbac"),
		R("node B", "nodes", "deletecollection", "delete every node", http.MethodDelete, "/api/v1/nodes", "", nil, "rbac"),
		R("node B", "leases", "create", "node B's heartbeat", http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "", lease, "rbac"),
		R("node B", "leases", "update", "node B's heartbeat", http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+b.node, "", lease, "rbac"),
		R("node B", "leases", "patch (merge)", "node B's heartbeat", http.MethodPatch, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+b.node, merge, labels, "rbac"),
		R("node B", "leases", "delete", "node B's heartbeat", http.MethodDelete, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+b.node, "", nil, "rbac"),
		R("B's VM", "virtualmachineinstances", "create", "a VMI", http.MethodPost, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances", "", vmi, "rbac"),
		R("B's VM", "virtualmachineinstances", "update", "move B's VM", http.MethodPut, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances/vm-b", "", vmi, "rbac"),
		R("B's VM", "virtualmachineinstances", "patch (merge)", "move B's VM", http.MethodPatch, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances/vm-b", merge, labels, "rbac"),
		R("B's VM", "virtualmachineinstances/status", "patch (JSON)", "say B's VM runs on A", http.MethodPatch, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances/vm-b/status", jsonPatch, jp("/status/nodeName", a.node), "rbac"),
		R("B's VM", "virtualmachineinstances", "delete", "delete B's VM", http.MethodDelete, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances/vm-b", "", nil, "rbac"),
		R("B's VM", "virtualmachineinstances", "deletecollection", "delete every VMI", http.MethodDelete, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances", "", nil, "rbac"),
		// A's own objects: allowed.
		R("A's pod", "ipreservations", "create", "reserve for its pod", http.MethodPost, resPath, "", ownRes, ""),
		R("A's pod", "ipreservations", "delete", "release its pod's address", http.MethodDelete, resPath+"/"+ownRes.Name, "", nil, ""),
		R("claim of A's VM", "ipreservations", "create", "reserve for its VM's claim", http.MethodPost, resPath, "", claimARes, ""),
		S("claim of A's VM", "record it, ownerPod its pod", claimA, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.IPs, s.OwnerPod = []string{"10.90.0.11/24"}, &ipamclaimsv1alpha1.OwnerPod{Name: "launcher-a"}
		}, ""),
		R("claim of A's VM", "ipreservations", "create", "reserve once more (an ADD that will lose)", http.MethodPost, resPath, "", rollbackRes, ""),
		R("claim of A's VM", "ipreservations", "delete", "roll back what it did not record", http.MethodDelete, resPath+"/"+rollbackRes.Name, "", nil, ""),
		R("sticky claim of A's pod", "ipamclaims", "create", "its StatefulSet pod's sticky claim", http.MethodPost, claimsPath, "", clm(claims.NewStickyClaim(db1, "net1", network, stsRef(db1))), ""),
		R("A's pod", "events", "create", "an Event about its pod", http.MethodPost, eventsPath, "", event("own-pod", podRef(podA)), ""),
		R("A's pod", "events", "patch (merge)", "count it again", http.MethodPatch, eventsPath+"/own-pod", merge, map[string]any{"count": 2}, ""),
		R("claim of A's VM", "events", "create", "an Event about its VM's claim", http.MethodPost, eventsPath, "", event("own-claim", claimRef(claimA)), ""),
		// What a mirror pod of A and a claim A presents beside B let it try.
		R("claim of B's VM", "ipreservations", "create", "reserve for B's VM's claim as its mirror pod", http.MethodPost, resPath, "", claimHeld(a.node, "10.90.0.42", claimB, mirrorA.Name), "reservation-claim-presented"),
		S("claim of B's VM", "prepend an address through its mirror pod", claimB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.IPs = append([]string{"10.90.0.42/24"}, s.IPs...)
		}, "claim-status-presented"),
		S("claim of B's VM", "move ownerPod to its mirror pod", claimB, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: mirrorA.Name}
		}, "claim-status-presented"),
		S("claim A's and B's pods present", "reorder its ips: A's family first", shared, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = []string{s.IPs[1], s.IPs[0]} }, "claim-status-append-only"),
		S("claim A's and B's pods present", "prepend its own address", shared, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append([]string{"10.90.0.41/24"}, s.IPs...) }, "claim-status-append-only"),
		S("claim A's and B's pods present", "drop B's IPv6 address", shared, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = s.IPs[:1] }, "claim-status-keeps-ips"),
		S("claim A's and B's pods present", "a second IPv4 address, one it holds", shared, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) { s.IPs = append(s.IPs, "10.90.0.41/24") }, "claim-status-one-per-slot"),
		S("claim A's and B's pods present", "move ownerPod to its mirror pod", shared, func(s *ipamclaimsv1alpha1.IPAMClaimStatus) {
			s.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: mirrorShared.Name}
		}, "claim-status-owner-pod-local"),
		// What A writes for someone else to act on (no deputy): each is
		// refused, or allowed and then judged by two controller sweeps
		// below.
		R("B's pod's reservation", "ipreservations", "create", "a decoy: a reservation naming B's pod, made on A (sandbox ffff), for the controller to take for B's newer sandbox", http.MethodPost, resPath, "", decoyOfB, "reservation-pod-bound"),
		R("claim of B's VM", "ipreservations", "create", "its pod's reservation with B's VM's claim's UID, for B's agent to adopt", http.MethodPost, resPath, "", podResWithClaimUID, "reservation-pod-bound"),
		R("claim of B's VM", "ipreservations", "create", "its pod's reservation whose summary says IPAMClaim, for the controller never to release", http.MethodPost, resPath, "", summaryClaimKind, "reservation-shape"),
		R("B's pod's reservation", "ipreservations", "create", "the lock of a free address holding B's pod's address in its spec", http.MethodPost, resPath, "", lockOfAnother, "reservation-shape"),
		R("B's pod", "ipreservations", "create", "its pod's reservation whose summary names B's live pod, for the controller never to release", http.MethodPost, resPath, "", summaryOfB, "reservation-shape"),
		R("A's pod", "ipreservations", "create", "its pod's reservation in a network nothing configures", http.MethodPost, resPath, "", unconfigured, ""),
		// A probe request about B's address, which C heard answer: what A
		// could write to make the controller release it.
		P("write node C's answer, Silent", applyAnswer(answerOf(c.node, tenurev1alpha1.ProbeSilent, "")), "probe-answer-own-node"),
		P("write node B's answer, Silent", applyAnswer(answerOf(b.node, tenurev1alpha1.ProbeSilent, "")), "probe-answer-own-node"),
		R(probeTarget, "ipprobes/status", "patch (JSON)", "turn node C's Answered into Silent", http.MethodPatch, probesPath+"/"+probeB.Name+"/status", jsonPatch,
			[]map[string]any{{"op": "test", "path": "/status/answers/0/node", "value": c.node}, {"op": "replace", "path": "/status/answers/0/result", "value": "Silent"},
				{"op": "remove", "path": "/status/answers/0/mac"}}, "probe-answer-own-node"),
		probeStatus("replace node C's Answered with Silent, adding its own", func(as []tenurev1alpha1.IPProbeAnswer) []tenurev1alpha1.IPProbeAnswer {
			for i := range as {
				if as[i].Node == c.node {
					as[i].Result, as[i].MAC = tenurev1alpha1.ProbeSilent, ""
				}
			}
			return append(as, tenurev1alpha1.IPProbeAnswer{Node: a.node, ObservedGeneration: probeB.Generation, ProbedAt: metav1.Now(), Result: tenurev1alpha1.ProbeSilent})
		}, "rbac"),
		R(probeTarget, "ipprobes/status", "patch (merge)", "its own answer alone, dropping node C's", http.MethodPatch, probesPath+"/"+probeB.Name+"/status", merge,
			map[string]any{"status": map[string]any{"answers": []any{answerOf(a.node, tenurev1alpha1.ProbeSilent, "")}}}, "probe-answer-own-node"),
		R(probeTarget, "ipprobes", "update", "re-ask: move spec.askedAt", http.MethodPut, probesPath+"/"+probeB.Name, "", probeObj(probeBefore), "rbac"),
		R(probeTarget, "ipprobes", "delete", "delete the request", http.MethodDelete, probesPath+"/"+probeB.Name, "", nil, "rbac"),
		R(probeTarget, "ipprobes", "create", "a request of its own", http.MethodPost, probesPath, "", probeObj(&tenurev1alpha1.IPProbe{ObjectMeta: metav1.ObjectMeta{Name: "am-forged"},
			Spec: tenurev1alpha1.IPProbeSpec{Network: network, Address: "10.90.0.1", Node: b.node, AskedAt: metav1.Now()}}), "rbac"),
		P("its own node's answer", applyAnswer(answerOf(a.node, tenurev1alpha1.ProbeSilent, "")), ""),
	}

	var table strings.Builder
	table.WriteString(testbed.MatrixHeader("node B's unless A's"))
	for i, r := range rows {
		if r.bodyFn != nil {
			r.body = r.bodyFn()
		}
		err := send(ctx, rc, r.attack)
		// A status update meets a conflict when the claim changed since its
		// read: sent again on a fresh read, never judged on the 409.
		for r.bodyFn != nil && apierrors.IsConflict(err) && ctx.Err() == nil {
			r.body = r.bodyFn()
			err = send(ctx, rc, r.attack)
		}
		got := testbed.RefusalRule(err)
		line, ok := testbed.MatrixRow(i+1, r.target, r.resource, r.verb, r.what, r.rule, got)
		if !ok {
			t.Errorf("row %d: %s", i+1, strings.TrimSpace(line))
		}
		table.WriteString(line)
	}
	t.Logf("attack matrix, agent of node %s against node %s:\n%s", a.node, b.node, table.String())

	// The kubelet of A (system:node:A, the Node authorizer and
	// NodeRestriction in force) writes what tenure's data or decisions
	// could be read off: an Event saying B's address answers on the wire,
	// and the Node objects whose taints and Ready condition the fencing
	// rules read. The Events are admitted (any kubelet records Events in
	// any namespace) and must move nothing: tenure acts on no Event. A's
	// own node marked NotReady and out-of-service fences A only; the
	// checks after the sweeps below judge B.
	kubelet, err := testbed.KubeletClientset(cptest.Current(), a.node)
	must("kubelet credentials of A", err)
	krc := kubelet.CoreV1().RESTClient()
	conflict := func(name string, about corev1.ObjectReference) *corev1.Event {
		e := event(name, about)
		e.Reason, e.Type = reservation.EventAddressConflict, corev1.EventTypeWarning
		e.Message = "10.90.0.1 answers on net1 from 02:00:00:00:0a:0a: skipped"
		e.Source.Host = b.node
		return e
	}
	outOfService := map[string]any{"spec": map[string]any{"taints": []map[string]any{{"key": corev1.TaintNodeOutOfService, "value": "nodeshutdown", "effect": "NoExecute"}}}}
	notReady := func() any {
		return map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": "Ready", "status": "False", "reason": "Forged",
			"lastHeartbeatTime": time.Now().UTC().Format(time.RFC3339), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}}
	}
	nodesPath := "/api/v1/nodes/"
	kubeletRows := []row{
		R("B's pod", "events", "create", "an AddressConflict Event saying B's pod's address answers from another MAC", http.MethodPost, eventsPath, "", conflict("conflict-b", podRef(podB)), ""),
		R("claim of B's VM", "events", "create", "an AddressConflict Event about B's VM's claim", http.MethodPost, eventsPath, "", conflict("conflict-vm-b", claimRef(claimB)), ""),
		R("node B", "nodes", "patch (merge)", "taint node B out-of-service", http.MethodPatch, nodesPath+b.node, merge, outOfService, "NodeRestriction"),
		{attack: attack{target: "node B", resource: "nodes/status", verb: "patch (merge)", what: "mark node B NotReady", method: http.MethodPatch, path: nodesPath + b.node + "/status", contentType: merge, rule: "NodeRestriction"}, bodyFn: notReady},
		R("node A", "nodes", "patch (merge)", "taint its own node out-of-service", http.MethodPatch, nodesPath+a.node, merge, outOfService, "NodeRestriction"),
		{attack: attack{target: "node A", resource: "nodes/status", verb: "patch (merge)", what: "mark its own node NotReady", method: http.MethodPatch, path: nodesPath + a.node + "/status", contentType: merge}, bodyFn: notReady},
		R("node B", "nodes", "delete", "delete node B", http.MethodDelete, nodesPath+b.node, "", nil, "rbac"),
		R("node A", "nodes", "delete", "delete its own Node", http.MethodDelete, nodesPath+a.node, "", nil, "rbac"),
	}
	table.Reset()
	table.WriteString(testbed.MatrixHeader("node B's unless A's"))
	for i, r := range kubeletRows {
		if r.bodyFn != nil {
			r.body = r.bodyFn()
		}
		got := testbed.RefusalRule(send(ctx, krc, r.attack))
		line, ok := testbed.MatrixRow(kubeletRowsFrom+i, r.target, r.resource, r.verb, r.what, r.rule, got)
		if !ok {
			t.Errorf("kubelet row %d: %s", kubeletRowsFrom+i, strings.TrimSpace(line))
		}
		table.WriteString(line)
	}
	t.Logf("attack matrix, kubelet of node %s against node %s:\n%s", a.node, b.node, table.String())

	// What the refusals and the allowed writes left: B's objects as B
	// wrote them.
	for _, r := range []*tenurev1alpha1.IPReservation{resB, resClaimB, resMoved} {
		got := &tenurev1alpha1.IPReservation{}
		if err := admin.Get(ctx, client.ObjectKey{Name: r.Name}, got); err != nil || got.UID != r.UID {
			t.Errorf("reservation %s: %v (uid %s, want %s)", r.Name, err, got.UID, r.UID)
		}
	}
	if st := getClaim(t, ctx, admin, ns, claimB.Name).Status; st.OwnerPod == nil || st.OwnerPod.Name != "launcher-b" || strings.Join(st.IPs, ",") != "10.90.0.2/24" {
		t.Errorf("B's VM's claim status: %+v", st)
	}
	for name, want := range map[string]claimState{shared.Name: sharedBefore, claimB.Name: claimBBefore} {
		if got := claimStateOf(t, ctx, admin, ns, name); !got.equal(want) {
			t.Errorf("claim %s: %s after the attacks, %s before", name, got, want)
		}
	}
	if st := getClaim(t, ctx, admin, ns, unused.Name).Status; len(st.IPs) > 0 || len(st.DelegatedPrefixes) > 0 || st.OwnerPod != nil {
		t.Errorf("the unused claim's status: %+v", st)
	}
	if ev := (&corev1.Event{}); admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: evB.Name}, ev) != nil || ev.Message != "B's own" || ev.InvolvedObject.Name != podB.Name {
		t.Errorf("B's Event: %+v", ev)
	}
	// The probe request as the controller asked it, C's answer as C wrote
	// it, and A's own beside it.
	probeAfter := &tenurev1alpha1.IPProbe{}
	if err := admin.Get(ctx, client.ObjectKey{Name: probeB.Name}, probeAfter); err != nil || probeAfter.UID != probeBefore.UID ||
		probeAfter.Generation != probeBefore.Generation || !probeAfter.Spec.AskedAt.Equal(&probeBefore.Spec.AskedAt) {
		t.Errorf("probe request %s: %v, %+v; before the attacks %+v", probeB.Name, err, probeAfter, probeBefore)
	}
	answers := map[string]tenurev1alpha1.IPProbeAnswer{}
	for _, an := range probeAfter.Status.Answers {
		answers[an.Node] = an
	}
	var cBefore tenurev1alpha1.IPProbeAnswer
	for _, an := range probeBefore.Status.Answers {
		if an.Node == c.node {
			cBefore = an
		}
	}
	if len(answers) != 2 || !equalAnswer(answers[c.node], cBefore) || answers[a.node].Result != tenurev1alpha1.ProbeSilent {
		t.Errorf("probe request %s's answers after the attacks: %+v, want node %s's as it wrote it (%+v) and node %s's own", probeB.Name, probeAfter.Status.Answers, c.node, cBefore, a.node)
	}
	if _, err := getProbe(ctx, admin, "am-forged"); !apierrors.IsNotFound(err) {
		t.Errorf("the request A tried to create: %v, want none", err)
	}

	// And after two full sweeps of a controller that saw every row's
	// write: B's reservations by name and UID, and its claims' records
	// and the reservations they record. (What A holds unrecorded in a
	// claim's slot is A's to lose: the controller releases it as a second
	// item of the slot.)
	ctrl := ctlStart(t, ctx, "e2e-attack-matrix", "--sweep-interval", "1s")
	ctrl.waitLeading(t, ctx)
	for range 2 {
		ctrl.waitSweepAfter(t, ctx, time.Now())
	}
	for _, r := range []*tenurev1alpha1.IPReservation{resB, resClaimB, resMoved} {
		got := &tenurev1alpha1.IPReservation{}
		if err := admin.Get(ctx, client.ObjectKey{Name: r.Name}, got); err != nil || got.UID != r.UID {
			t.Errorf("after two sweeps: reservation %s: %v (uid %s, want %s)", r.Name, err, got.UID, r.UID)
		}
	}
	for name, want := range map[string]claimState{shared.Name: sharedBefore, claimB.Name: claimBBefore} {
		got := claimStateOf(t, ctx, admin, ns, name)
		if !slices.Equal(got.ips, want.ips) || !slices.Equal(got.prefixes, want.prefixes) || got.owner != want.owner {
			t.Errorf("after two sweeps: claim %s: %s, %s before", name, got, want)
		}
		for _, rec := range append(slices.Clone(want.ips), want.prefixes...) {
			p := netip.MustParsePrefix(rec)
			n := reservation.AddressName(network, p.Addr())
			if slices.Contains(want.prefixes, rec) {
				n = reservation.PrefixName(network, p.Masked())
			}
			if got.held[n] != want.held[n] {
				t.Errorf("after two sweeps: claim %s's recorded %s: reservation %s uid %q, %q before", name, rec, n, got.held[n], want.held[n])
			}
		}
	}
}

// kubeletRowsFrom numbers the kubelet's rows as docs/design.md's table
// does: after the agent's rows and the data path's (93–97), which other tests send.
const kubeletRowsFrom = 98

func webhookConfigObject(t testing.TB, ctx context.Context) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := apiClient(t).Get(ctx, client.ObjectKey{Name: "tenure-agent-node-restriction"}, vwc); err != nil {
		t.Fatal(err)
	}
	return vwc
}

// waitWebhookGone waits until the API server no longer calls the webhook
// for agent a: a claim the agent never creates is allowed (dry run).
func waitWebhookGone(t testing.TB, ctx context.Context, a nodeAgent) {
	t.Helper()
	probe := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.AgentNamespace, Name: "webhook-gone-probe"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "probe", Interface: "net1"}}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return a.c.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil, nil
	}); err != nil {
		t.Fatal("the API server still calls the webhook after its configuration was deleted")
	}
}

func equalAnswer(a, b tenurev1alpha1.IPProbeAnswer) bool {
	return a.Node == b.Node && a.ObservedGeneration == b.ObservedGeneration && a.ProbedAt.Equal(&b.ProbedAt) &&
		a.Result == b.Result && a.MAC == b.MAC && a.Kind == b.Kind && a.Interface == b.Interface && a.Message == b.Message
}

func getProbe(ctx context.Context, c client.Client, name string) (*tenurev1alpha1.IPProbe, error) {
	p := &tenurev1alpha1.IPProbe{}
	return p, c.Get(ctx, client.ObjectKey{Name: name}, p)
}
