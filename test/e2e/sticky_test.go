//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/agent"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/controller/sticky"
	"github.com/tenure-ipam/tenure/internal/ops"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// statefulSetSim plays the StatefulSet controller for one StatefulSet
// object, which nothing else runs here: it creates the pods NAME-ORDINAL
// (a new UID each time, on the node the test says, with the template's
// labels and annotations and a controller reference), and deletes them as
// the kubelet would after the CNI DEL; the replicas field is the test's to
// set. There is no garbage collector either: the test deletes the pods of
// a deleted StatefulSet itself.
type statefulSetSim struct {
	t    *testing.T
	ctx  context.Context
	c    client.Client
	sts  *appsv1.StatefulSet
	pods map[int]pod
}

func newStatefulSetSim(t *testing.T, ctx context.Context, c client.Client, ns, name string, replicas int32, annotations map[string]string) *statefulSetSim {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if err := c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	return &statefulSetSim{t: t, ctx: ctx, c: c, sts: sts, pods: map[int]pod{}}
}

// start creates the pod of ordinal on node.
func (s *statefulSetSim) start(ordinal int, node string) pod {
	s.t.Helper()
	yes := true
	tmpl := s.sts.Spec.Template
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.sts.Namespace, Name: fmt.Sprintf("%s-%d", s.sts.Name, ordinal),
			Labels: tmpl.Labels, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.sts.Name, UID: s.sts.UID,
				Controller: &yes, BlockOwnerDeletion: &yes}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: tmpl.Spec.Containers},
	}
	if err := s.c.Create(s.ctx, p); err != nil {
		s.t.Fatal(err)
	}
	sp := pod{ns: p.Namespace, name: p.Name, uid: string(p.UID), node: node, containerID: "sandbox-" + string(p.UID)}
	s.pods[ordinal] = sp
	return sp
}

// stop runs the pod's CNI DEL, as its kubelet does, and deletes it.
func (s *statefulSetSim) stop(ordinal int, conf func(pod) []byte) {
	s.t.Helper()
	p := s.pods[ordinal]
	if err := del(s.ctx, p, conf(p)); err != nil {
		s.t.Fatalf("DEL %s: %v", p.name, err)
	}
	if err := testbed.ForceDeletePod(s.ctx, s.c, p.ns, p.name); err != nil {
		s.t.Fatal(err)
	}
	delete(s.pods, ordinal)
}

func (s *statefulSetSim) scale(replicas int32) {
	s.t.Helper()
	s.sts.Spec.Replicas = &replicas
	if err := s.c.Update(s.ctx, s.sts); err != nil {
		s.t.Fatal(err)
	}
}

// claimOrNil reads a claim from the API server; nil when it is gone.
func claimOrNil(t *testing.T, ctx context.Context, c client.Client, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	cl := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return cl
}

// stickyState is what a sticky claim holds: its status and its reservations.
type stickyState struct {
	uid                     string
	ips, prefixes, reserved []string
}

func stateOf(t *testing.T, ctx context.Context, cl *ipamclaimsv1alpha1.IPAMClaim) stickyState {
	return stickyState{uid: string(cl.UID), ips: cl.Status.IPs, prefixes: cl.Status.DelegatedPrefixes, reserved: reservedItems(ownedBy(t, ctx, string(cl.UID)))}
}

func (s stickyState) equal(o stickyState) bool {
	return s.uid == o.uid && slices.Equal(s.ips, o.ips) && slices.Equal(s.prefixes, o.prefixes) && slices.Equal(s.reserved, o.reserved)
}

func TestStickyStatefulSet(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	nodes := []string{"st-a", "st-b", "st-c"}
	agents := startAgents(t, ctx, nodes...)
	c := apiClient(t)
	// Six addresses per family, so that three sticky pods and three others
	// fill them: whoever takes a free address takes a sticky one if it is
	// free.
	ipam := `{"network_name":"sticky","prefix_delegation":{"range":"fd00:7300::/56","prefix_length":60},
		"ipRanges":[{"range":"10.73.0.0/24","range_start":"10.73.0.1","range_end":"10.73.0.6"},{"range":"fd00:73::/64","range_start":"fd00:73::1","range_end":"fd00:73::6"}]}`
	conf := func(p pod) []byte { return netconf("stickynet", agents[p.node].Socket, ipam) }
	const ns = "e2e-sticky"
	// A grace period far beyond the test, for the rounds and the scale to
	// zero; a second controller with a short one follows.
	ctl1 := ctlStart(t, ctx, "e2e-sticky-1", "--sticky-release-after", "1h", "--sweep-interval", "1m")
	ctl1.waitLeading(t, ctx)

	db := newStatefulSetSim(t, ctx, c, ns, "db", 3, map[string]string{
		claims.StickyAnnotation:       "true",
		"k8s.v1.cni.cncf.io/networks": `[{"name":"stickynet","interface":"net1"}]`,
	})
	claimName := func(ord int) string { return fmt.Sprintf("db-%d.net1", ord) }
	first := map[int][]string{}
	held := map[int]stickyState{}

	// Five rounds of the StatefulSet's pods, each time re-created with new
	// UIDs on other nodes: the same addresses and prefix every time.
	for round := range 5 {
		for ord := range 3 {
			p := db.start(ord, nodes[(ord+round)%3])
			r, err := add(ctx, p, conf(p))
			if err != nil {
				t.Fatalf("round %d: ADD %s on %s: %v", round, p.name, p.node, err)
			}
			got := addrs(r)
			cl := getClaim(t, ctx, c, ns, claimName(ord))
			st := stateOf(t, ctx, cl)
			if round == 0 {
				first[ord], held[ord] = got, st
				if len(got) != 2 || len(st.prefixes) != 1 || len(st.reserved) != 3 {
					t.Fatalf("%s: addresses %v, claim %+v: want one per family and a prefix, three reservations", p.name, got, st)
				}
				checkStickyClaim(t, cl, db, ord)
				continue
			}
			if !slices.Equal(got, first[ord]) || !st.equal(held[ord]) {
				t.Fatalf("round %d: %s on %s got %v, claim %+v; round 0 gave %v, %+v", round, p.name, p.node, got, st, first[ord], held[ord])
			}
		}
		if round == 0 {
			checkClaimTable(t, ctx, ns)
			checkStickyInTenurectlGet(t, ctx, c, "sticky", "db")
		}
		if round < 4 {
			for ord := range 3 {
				db.stop(ord, conf)
			}
			// A DEL frees nothing of a sticky pod's.
			for ord := range 3 {
				if st := stateOf(t, ctx, getClaim(t, ctx, c, ns, claimName(ord))); !st.equal(held[ord]) {
					t.Fatalf("after the DELs of round %d: claim %s %+v, was %+v", round, claimName(ord), st, held[ord])
				}
			}
		}
	}

	// Scale to zero, and another workload allocates meanwhile: it gets the
	// three other addresses of each family and then finds the range full.
	db.scale(0)
	for ord := range 3 {
		db.stop(ord, conf)
	}
	ctlPoll(t, ctx, "the controller's scaled-down marks on the three claims", func() (bool, error) {
		for ord := range 3 {
			if sticky.MarkOf(getClaim(t, ctx, c, ns, claimName(ord))) == nil {
				return false, nil
			}
		}
		return true, nil
	})
	stickyAddrs := map[string]bool{}
	for _, a := range first {
		for _, x := range a {
			stickyAddrs[x] = true
		}
	}
	var others []pod
	for i := range 3 {
		p := newPod(t, ctx, c, ns, nodes[i], nil)
		r, err := add(ctx, p, conf(p))
		if err != nil {
			t.Fatalf("other workload's pod %d: %v", i, err)
		}
		for _, x := range addrs(r) {
			if stickyAddrs[x] {
				t.Fatalf("another workload got %s, a sticky address of the scaled-down StatefulSet", x)
			}
		}
		others = append(others, p)
	}
	extra := newPod(t, ctx, c, ns, nodes[0], nil)
	if _, err := add(ctx, extra, conf(extra)); cniCode(err) != agent.CodeRangeFull {
		t.Fatalf("a fourth pod of the other workload: %v, want the range full (100): the free addresses are the StatefulSet's", err)
	}

	// Back to three: the same addresses, on yet other nodes.
	db.scale(3)
	for ord := range 3 {
		p := db.start(ord, nodes[(ord+2)%3])
		r, err := add(ctx, p, conf(p))
		if err != nil {
			t.Fatalf("after scaling up: ADD %s: %v", p.name, err)
		}
		if got := addrs(r); !slices.Equal(got, first[ord]) {
			t.Fatalf("after scaling up: %s got %v, had %v", p.name, got, first[ord])
		}
	}
	ctlPoll(t, ctx, "the marks dropped once the StatefulSet is back to three", func() (bool, error) {
		for ord := range 3 {
			if sticky.MarkOf(getClaim(t, ctx, c, ns, claimName(ord))) != nil {
				return false, nil
			}
		}
		return true, nil
	})

	// A controller with a short grace period takes over. Scale to one; the
	// pod of ordinal 1 goes, the pod of ordinal 2 stays for now.
	ctl1.Stop()
	ctl2 := ctlStart(t, ctx, "e2e-sticky-2", "--sticky-release-after", "2s", "--sweep-interval", "1m")
	ctl2.waitLeading(t, ctx)
	db.scale(1)
	db.stop(1, conf)
	ctlPoll(t, ctx, "db-1's claim and reservations released after the grace period", func() (bool, error) {
		return claimOrNil(t, ctx, c, ns, claimName(1)) == nil && len(ownedBy(t, ctx, held[1].uid)) == 0, nil
	})
	// db-2 was scaled down at the same moment, but its pod still exists.
	if cl := claimOrNil(t, ctx, c, ns, claimName(2)); cl == nil || !stateOf(t, ctx, cl).equal(held[2]) {
		t.Fatalf("db-2's claim (%v) was released while its pod exists", cl)
	}
	db.stop(2, conf)
	ctlPoll(t, ctx, "db-2's claim released once its pod is gone", func() (bool, error) {
		return claimOrNil(t, ctx, c, ns, claimName(2)) == nil, nil
	})

	// What db-1 and db-2 held is free again: two more pods of the other
	// workload get exactly those addresses.
	want := append(slices.Clone(first[1]), first[2]...)
	var got []string
	for i := range 2 {
		p := newPod(t, ctx, c, ns, nodes[i], nil)
		ctlPoll(t, ctx, "the other workload's ADD after the release", func() (bool, error) {
			r, err := add(ctx, p, conf(p))
			if cniCode(err) == agent.CodeRangeFull {
				return false, nil // the reservations' deletes may not have reached this agent's cache yet
			}
			if err != nil {
				return false, err
			}
			got = append(got, addrs(r)...)
			return true, nil
		})
		others = append(others, p)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the other workload got %v, want the released %v", got, want)
	}

	// Deleting the StatefulSet (and its pod, as the garbage collector
	// would) releases the rest: no reservation is left but the other
	// workload's.
	if err := c.Delete(ctx, db.sts); err != nil {
		t.Fatal(err)
	}
	db.stop(0, conf)
	ctlPoll(t, ctx, "db-0's claim released after the StatefulSet's deletion", func() (bool, error) {
		return claimOrNil(t, ctx, c, ns, claimName(0)) == nil, nil
	})
	ctlPoll(t, ctx, "only the other workload's reservations left", func() (bool, error) {
		for _, r := range reservationsOf(t, ctx, "sticky") {
			if r.Spec.Owner.Kind != tenurev1alpha1.OwnerPod {
				return false, nil
			}
		}
		return true, nil
	})
	if n := len(reservationsOf(t, ctx, "sticky")); n != 2*len(others) {
		t.Fatalf("%d reservations left, want the other workload's %d", n, 2*len(others))
	}
	for reason, min := range map[string]float64{"ScaledDown": 2, "StatefulSetGone": 1} {
		if n, _ := ctl2.metric(t, "tenure_sticky_claims_released_total", `reason="`+reason+`"`); n < min {
			t.Errorf("tenure_sticky_claims_released_total{reason=%q} = %v, want at least %v", reason, n, min)
		}
	}
}

// checkStickyClaim: the claim says it is sticky and for which StatefulSet
// and pod, and the StatefulSet owns it without blocking its deletion.
func checkStickyClaim(t *testing.T, cl *ipamclaimsv1alpha1.IPAMClaim, s *statefulSetSim, ord int) {
	t.Helper()
	if cl.Labels[claims.LabelSticky] != "true" || cl.Labels[claims.LabelStatefulSet] != s.sts.Name ||
		cl.Annotations[claims.AnnotationPod] != fmt.Sprintf("%s-%d", s.sts.Name, ord) || cl.Spec.Interface != "net1" || cl.Spec.Network != "stickynet" {
		t.Errorf("claim %s: labels %v annotations %v spec %+v", cl.Name, cl.Labels, cl.Annotations, cl.Spec)
	}
	refs := cl.OwnerReferences
	if len(refs) != 1 || refs[0].Kind != "StatefulSet" || refs[0].UID != s.sts.UID || *refs[0].Controller || *refs[0].BlockOwnerDeletion {
		t.Errorf("claim %s: ownerReferences %+v, want StatefulSet %s (uid %s), neither controller nor blocking", cl.Name, refs, s.sts.Name, s.sts.UID)
	}
}

// checkClaimTable asks the API server for the table `kubectl get
// ipamclaims -l ipam.tenure.dev/sticky` prints: three rows whose
// StatefulSet column says db.
func checkClaimTable(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	cfg := cptest.Current().Config
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimSuffix(cfg.Host, "/")+"/apis/k8s.cni.cncf.io/v1alpha1/namespaces/"+ns+"/ipamclaims?labelSelector="+claims.LabelSticky+"%3Dtrue", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("table: %s: %v %s", resp.Status, err, body)
	}
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "StatefulSet" })
	if col < 0 {
		t.Fatalf("no StatefulSet column in %+v", table.ColumnDefinitions)
	}
	if len(table.Rows) != 3 {
		t.Fatalf("%d sticky claims listed, want 3", len(table.Rows))
	}
	for _, r := range table.Rows {
		if r.Cells[col] != "db" {
			t.Errorf("row %v: StatefulSet column %v, want db", r.Cells[0], r.Cells[col])
		}
	}
}

// checkStickyInTenurectlGet: what `tenurectl get NETWORK` reports names
// the StatefulSet of every sticky claim's reservation.
func checkStickyInTenurectlGet(t *testing.T, ctx context.Context, c client.Client, network, sts string) {
	t.Helper()
	rep, err := ops.New(c).Get(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	sticky := 0
	for _, v := range rep.Reservations {
		if v.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim {
			if v.StatefulSet != sts {
				t.Errorf("tenurectl get %s: %s of claim %s shows StatefulSet %q, want %q", network, v.Address, v.Owner.Name, v.StatefulSet, sts)
			}
			sticky++
		}
	}
	if sticky == 0 {
		t.Errorf("tenurectl get %s shows no claim-owned reservation", network)
	}
}
