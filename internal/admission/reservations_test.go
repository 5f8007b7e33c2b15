package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// podRes is a pod's reservation as the agent of node writes it.
func podRes(item, node, pod string, mut ...func(*tenurev1alpha1.ReservationOwner)) *tenurev1alpha1.IPReservation {
	r := res(item, node, nil, pod)
	r.Spec.Owner.PodUID = r.Spec.Owner.UID
	for _, m := range mut {
		m(&r.Spec.Owner)
	}
	return reservation.New(reservation.Spec{Network: r.Spec.Network, Kind: r.Spec.Kind, Item: mustItem(r.Spec.Address), Range: r.Spec.Range, Owner: r.Spec.Owner})
}

func mustItem(s string) netip.Prefix {
	p, err := reservation.ParseItem(s)
	if err != nil {
		panic(err)
	}
	return p
}

func TestAPodsReservationIsTheAgentsOfThePodsNode(t *testing.T) {
	p1 := podOn("p1", "b", "")   // the victim's pod, on node b
	own := podOn("own", "a", "") // node a's own pod
	vm := claimObj("vm")
	for _, tc := range []struct {
		name string
		r    *tenurev1alpha1.IPReservation
		pod  *corev1.Pod
		rule string
	}{
		{"its own pod", podRes("10.0.0.2/32", "a", "own"), &own, ""},
		{"a decoy naming node b's pod", podRes("10.0.0.3/32", "a", "p1", func(o *tenurev1alpha1.ReservationOwner) { o.ContainerID = "ffff" }), &p1, RuleReservationPodBound},
		{"a pod that does not exist", podRes("10.0.0.4/32", "a", "ghost"), nil, RuleReservationPodBound},
		{"its own pod with a claim's UID", podRes("10.0.0.5/32", "a", "own", func(o *tenurev1alpha1.ReservationOwner) { o.UID, o.PodUID = string(vm.UID), string(vm.UID) }), &own, RuleReservationPodBound},
		{"its own pod with node b's pod's UID", podRes("10.0.0.6/32", "a", "own", func(o *tenurev1alpha1.ReservationOwner) { o.UID, o.PodUID = string(p1.UID), string(p1.UID) }), &own, RuleReservationPodBound},
		{"its own pod, podName another pod", podRes("10.0.0.7/32", "a", "own", func(o *tenurev1alpha1.ReservationOwner) { o.PodName = "p1" }), &own, RuleReservationPodBound},
		{"a claim's reservation is judged elsewhere", res("10.0.0.8/32", "a", vm, "own"), nil, ""},
	} {
		check(t, tc.name, PodReservationCreate("a", tc.r, tc.pod), tc.rule)
	}
}

func TestReservationShapeIsJudgedForEveryWriter(t *testing.T) {
	good := podRes("10.0.0.2/32", "a", "own")
	lies := good.DeepCopy()
	lies.Annotations[reservation.AnnotationSpecSummary] = strings.Replace(lies.Annotations[reservation.AnnotationSpecSummary], "kind=Pod", "kind=IPAMClaim", 1)
	relocked := good.DeepCopy()
	relocked.Name = reservation.AddressName("net", mustItem("10.0.0.9").Addr())
	own := podOn("own", "a", "")
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(&own).Build()
	srv := httptest.NewServer(&Handler{Reader: c})
	defer srv.Close()
	agentOn := func(node string) authenticationv1.UserInfo {
		return authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-agent",
			Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"tenure-agent-x"}, extraNodeName: {node}}}
	}
	admin := authenticationv1.UserInfo{Username: "kubernetes-admin", Groups: []string{"system:masters"}}
	create := func(user authenticationv1.UserInfo, r *tenurev1alpha1.IPReservation) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Name: r.Name, Resource: metaGVR("ipam.tenure.dev", "ipreservations"), UserInfo: user, Object: raw(t, r)}
	}
	update := func(user authenticationv1.UserInfo, old, r *tenurev1alpha1.IPReservation) *admissionv1.AdmissionRequest {
		req := create(user, r)
		req.Operation, req.OldObject = admissionv1.Update, raw(t, old)
		return req
	}
	for _, tc := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
		rule string
	}{
		{"the agent, its own pod's", create(agentOn("a"), good), ""},
		{"the agent of another node", create(agentOn("b"), good), RuleReservationPodBound},
		{"the agent, a summary that says IPAMClaim", create(agentOn("a"), lies), RuleReservationShape},
		{"an administrator, as New makes it", create(admin, good), ""},
		{"an administrator, a summary that says IPAMClaim", create(admin, lies), RuleReservationShape},
		{"an administrator, the lock of another address", create(admin, relocked), RuleReservationShape},
		{"an administrator rewrites the summary", update(admin, good, lies), RuleReservationShape},
	} {
		body, _ := json.Marshal(admissionv1.AdmissionReview{Request: tc.req})
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r := out.Response
		switch {
		case r == nil:
			t.Errorf("%s: no response", tc.name)
		case tc.rule == "" && !r.Allowed:
			t.Errorf("%s: refused %q", tc.name, r.Result.Message)
		case tc.rule != "" && (r.Allowed || r.Result == nil || !strings.HasPrefix(r.Result.Message, "["+tc.rule+"]")):
			t.Errorf("%s: %+v, want refused by [%s]", tc.name, r, tc.rule)
		}
	}
}

// The controller's pod cache allows a pod's reservation without a read;
// where it does not (no such pod yet, or bound elsewhere: a cache that lags
// or a decoy), the live GET decides.
func TestAPodsReservationIsAllowedOnTheCacheAndRefusedOnlyLive(t *testing.T) {
	own := podOn("own", "a", "")
	p1 := podOn("p1", "b", "")
	gets := 0
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(&own, &p1).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return cl.Get(ctx, key, obj, opts...)
		}}).Build()
	cache := map[string]*corev1.Pod{"own": &own, "p1": &p1}
	h := &Handler{Reader: c, Pods: func(namespace, name string) (string, string, bool) {
		p := cache[name]
		if p == nil || namespace != ns {
			return "", "", false
		}
		return string(p.UID), p.Spec.NodeName, true
	}}
	agentA := authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-agent",
		Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"tenure-agent-x"}, extraNodeName: {"a"}}}
	judge := func(r *tenurev1alpha1.IPReservation) Verdict {
		return h.Judge(t.Context(), &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Name: r.Name,
			Resource: metaGVR("ipam.tenure.dev", "ipreservations"), UserInfo: agentA, Object: raw(t, r)})
	}
	check(t, "its own pod, cached", judge(podRes("10.0.0.2/32", "a", "own")), "")
	if gets != 0 {
		t.Fatalf("%d GETs for a pod the cache holds bound to the caller's node; want none", gets)
	}
	check(t, "node b's pod", judge(podRes("10.0.0.3/32", "a", "p1")), RuleReservationPodBound)
	if gets != 1 {
		t.Fatalf("%d GETs for a pod the cache holds bound to another node; want the one that decides", gets)
	}
	delete(cache, "own") // the cache lags behind a new pod
	check(t, "its own pod, not yet cached", judge(podRes("10.0.0.4/32", "a", "own")), "")
	if gets != 2 {
		t.Fatalf("%d GETs in all; want one more for the pod the cache lacks", gets)
	}
}
