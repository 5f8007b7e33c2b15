package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
)

func raw(t *testing.T, v any) runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

// The handler over HTTP: an AdmissionReview in, the verdict of the rule
// out, with the facts read through the client.
func TestHandlerServesReviews(t *testing.T) {
	vm := claimObj("vm")
	launcher := podOn("launcher-a", "a", "vm")
	held := res("10.0.0.2/32", "a", vm, "launcher-a")
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(vm, &launcher, held).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	srv := httptest.NewServer(&Handler{Reader: c})
	defer srv.Close()

	agentOn := func(node string) authenticationv1.UserInfo {
		return authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-agent",
			Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"tenure-agent-x"}, extraNodeName: {node}}}
	}
	recorded := withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-a")
	forged := withOwner(claimObj("vm", "10.0.0.9/24"), "launcher-a")
	statusReq := func(user authenticationv1.UserInfo, c *ipamclaimsv1alpha1.IPAMClaim) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Update, SubResource: "status", Namespace: ns, Name: "vm",
			Resource: metaGVR("k8s.cni.cncf.io", "ipamclaims"), UserInfo: user, Object: raw(t, c), OldObject: raw(t, vm)}
	}
	for _, tc := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
		rule string
	}{
		{"the node's agent records what the claim holds", statusReq(agentOn("a"), recorded), ""},
		{"it records what the claim does not hold", statusReq(agentOn("a"), forged), RuleClaimStatusItemsOwned},
		{"another node's agent", statusReq(agentOn("b"), recorded), RuleClaimStatusPresented},
		{"a token bound to no pod", statusReq(authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-agent"}, recorded), RuleNodeBoundToken},
		{"not the agent", statusReq(authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-controller"}, forged), ""},
		{"a reservation delete of a recorded item", &admissionv1.AdmissionRequest{UID: "u2", Operation: admissionv1.Delete, Name: held.Name,
			Resource: metaGVR("ipam.tenure.dev", "ipreservations"), UserInfo: agentOn("a"), OldObject: raw(t, held)}, ""},
		{"a Pod write it does not judge", &admissionv1.AdmissionRequest{UID: "u3", Operation: admissionv1.Create,
			Resource: metaGVR("", "pods"), UserInfo: agentOn("a"), Object: raw(t, launcher)}, RuleUnjudged},
		{"an Event about a pod of its node", &admissionv1.AdmissionRequest{UID: "u4", Operation: admissionv1.Create, Namespace: ns,
			Resource: metaGVR("", "events"), UserInfo: agentOn("a"), Object: raw(t, corev1.Event{InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "launcher-a"}})}, ""},
		{"an events.k8s.io Event about it from another node", &admissionv1.AdmissionRequest{UID: "u5", Operation: admissionv1.Create, Namespace: ns,
			Resource: metaGVR("events.k8s.io", "events"), UserInfo: agentOn("b"), Object: raw(t, map[string]any{"regarding": map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "launcher-a"}})}, RuleEventSubject},
	} {
		// The stored claim records nothing yet: ask before it changes.
		if tc.name == "a reservation delete of a recorded item" {
			stored := recorded.DeepCopy()
			cur := &ipamclaimsv1alpha1.IPAMClaim{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(vm), cur); err != nil {
				t.Fatal(err)
			}
			cur.Status = stored.Status
			if err := c.Status().Update(t.Context(), cur); err != nil {
				t.Fatal(err)
			}
			tc.rule = RuleReservationRollback
		}
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
		case r == nil || r.UID != tc.req.UID:
			t.Errorf("%s: response %+v", tc.name, r)
		case tc.rule == "" && !r.Allowed:
			t.Errorf("%s: refused %q", tc.name, r.Result.Message)
		case tc.rule != "" && (r.Allowed || r.Result == nil || r.Result.Code != http.StatusForbidden || !strings.HasPrefix(r.Result.Message, "["+tc.rule+"]")):
			t.Errorf("%s: %+v, want refused by [%s]", tc.name, r, tc.rule)
		}
	}
}

func metaGVR(group, resource string) metav1.GroupVersionResource {
	return metav1.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
}

// BenchmarkDecideClaimStatus is the webhook's own work on the agent's
// most frequent judged write: decoding the two claims and deciding over
// the facts of a busy node (50 pods in the namespace, each with a network
// annotation to parse). The API server's round trip and the live reads
// come on top (BenchmarkWebhookJudgedWrites in test/e2e measures those).
func BenchmarkDecideClaimStatus(b *testing.B) {
	vm := claimObj("vm")
	var pods []corev1.Pod
	for i := range 50 {
		pods = append(pods, podOn(fmt.Sprintf("pod-%d", i), "a", fmt.Sprintf("db-%d", i)))
	}
	pods = append(pods, podOn("launcher-a", "a", "vm"))
	owned := []tenurev1alpha1.IPReservation{*res("10.0.0.2/32", "a", vm, "launcher-a")}
	newRaw, _ := json.Marshal(withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-a"))
	oldRaw, _ := json.Marshal(vm)
	for b.Loop() {
		old, c := &ipamclaimsv1alpha1.IPAMClaim{}, &ipamclaimsv1alpha1.IPAMClaim{}
		if json.Unmarshal(oldRaw, old) != nil || json.Unmarshal(newRaw, c) != nil {
			b.Fatal("decode")
		}
		if v := ClaimStatusUpdate("a", old, c, ClaimStatus{Pods: pods, Owned: owned}); !v.Allowed {
			b.Fatal(v.Message)
		}
	}
}

// The pods a request names are read first, and the node's pods are listed
// only when those do not make the rules allow: a claim's ADD (its
// reservations' creates and the status write) lists no pods, a refusal
// and a rollback whose pod is gone do, and each verdict is the one the
// rules give on the LIST. The claim's reservations are listed only for a
// status write that adds items.
func TestNamedPodsAreReadBeforeTheNodesPods(t *testing.T) {
	vm := claimObj("vm")
	launcher, other, elsewhere := podOn("launcher-a", "a", "vm"), podOn("launcher-a2", "a", "vm"), podOn("launcher-b", "b", "vm")
	agentOn := authenticationv1.UserInfo{Username: "system:serviceaccount:ipam:tenure-agent",
		Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"tenure-agent-x"}, extraNodeName: {"a"}}}
	reservationReq := func(op admissionv1.Operation, r *tenurev1alpha1.IPReservation) *admissionv1.AdmissionRequest {
		req := &admissionv1.AdmissionRequest{Operation: op, Name: r.Name, Resource: metaGVR("ipam.tenure.dev", "ipreservations"), UserInfo: agentOn}
		if op == admissionv1.Delete {
			req.OldObject = raw(t, r)
		} else {
			req.Object = raw(t, r)
		}
		return req
	}
	heldByGone := res("10.0.0.3/32", "a", vm, "launcher-gone")
	statusReq := func(old, new *ipamclaimsv1alpha1.IPAMClaim) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{Operation: admissionv1.Update, SubResource: "status", Namespace: ns, Name: "vm",
			Resource: metaGVR("k8s.cni.cncf.io", "ipamclaims"), UserInfo: agentOn, Object: raw(t, new), OldObject: raw(t, old)}
	}
	recorded := withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-b")
	for _, tc := range []struct {
		name               string
		req                *admissionv1.AdmissionRequest
		rule               string
		podLists, resLists int
	}{
		{"a reservation for the claim its pod presents", reservationReq(admissionv1.Create, res("10.0.0.2/32", "a", vm, "launcher-a")), "", 0, 0},
		{"the status write recording it", statusReq(vm, withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-a")), "", 0, 1},
		{"a migration target's status write: ownerPod moves, no item added", statusReq(recorded, withOwner(claimObj("vm", "10.0.0.2/24"), "launcher-a")), "", 0, 0},
		{"a reservation naming another node's pod", reservationReq(admissionv1.Create, res("10.0.0.4/32", "a", vm, "launcher-b")), RuleReservationClaim, 1, 0},
		{"a rollback whose pod is gone while another of the node presents the claim", reservationReq(admissionv1.Delete, heldByGone), "", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podLists, resLists := 0, 0
			c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(vm, &launcher, &other, &elsewhere, res("10.0.0.2/32", "a", vm, "launcher-a")).
				WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
				WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					switch l.(type) {
					case *corev1.PodList:
						podLists++
					case *tenurev1alpha1.IPReservationList:
						resLists++
					}
					return c.List(ctx, l, opts...)
				}}).Build()
			v := (&Handler{Reader: c}).Judge(t.Context(), tc.req)
			check(t, tc.name, v, tc.rule)
			if podLists != tc.podLists || resLists != tc.resLists {
				t.Errorf("%d LISTs of pods and %d of reservations, want %d and %d", podLists, resLists, tc.podLists, tc.resLists)
			}
			if tc.rule == RuleReservationClaim && !strings.Contains(v.Message, "launcher-a, launcher-a2") {
				t.Errorf("the refusal names no presenting pods of the node: %s", v.Message)
			}
		})
	}
}

// TestResourceNotServed: the API server's 404 for an object names it; its
// 404 for a resource it does not serve (a VMI CRD deleted after the REST
// mapper learnt it) names nothing, and then no VMI decides a claim.
func TestResourceNotServed(t *testing.T) {
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstances"}
	unserved := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{}}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the VMI does not exist", apierrors.NewNotFound(gr, "vm1"), false},
		{"the resource is not served", unserved, true},
		{"the resource is not served: no Status in the answer", apierrors.NewGenericServerResponse(http.StatusNotFound, "get", gr, "vm1", "404 page not found", 0, true), true},
		{"the resource is not served, no details", &apierrors.StatusError{ErrStatus: metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound}}, true},
		{"another error", apierrors.NewForbidden(gr, "vm1", fmt.Errorf("no")), false},
		{"no error", nil, false},
	} {
		if got := resourceNotServed(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
