package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/kubevirt"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// Path is where the webhook is served.
const Path = "/validate-agent"

// AgentServiceAccount is the name of the agent's service account; the
// webhook judges it in any namespace (the deployment chooses the
// namespace).
const AgentServiceAccount = "tenure-agent"

// The user extra a pod-bound service-account token carries.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// maxReview bounds the body of one AdmissionReview (an object is at most
// about 1.5 MiB in etcd; old and new together).
const maxReview = 8 << 20

// Handler serves the webhook. Reader reads from the API server directly:
// the agent writes a reservation and then the claim status recording it,
// and a cache may not have the first yet.
type Handler struct {
	Reader client.Reader
	Log    *slog.Logger
}

// IsAgent reports whether username is the agent's service account, in
// whatever namespace.
func IsAgent(username string) bool {
	return strings.HasPrefix(username, "system:serviceaccount:") && strings.HasSuffix(username, ":"+AgentServiceAccount)
}

// CallerNode is the node a pod-bound token names: one value, and only
// when the token also names a pod; "" otherwise.
func CallerNode(extra map[string][]string) string {
	if len(extra[extraPodName]) != 1 || len(extra[extraNodeName]) != 1 {
		return ""
	}
	return extra[extraNodeName][0]
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("body is no AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	start := time.Now()
	v := h.Judge(r.Context(), req)
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: v.Allowed}
	if !v.Allowed {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: v.Message}
	}
	if h.Log != nil {
		lvl := slog.LevelDebug
		if !v.Allowed {
			lvl = slog.LevelInfo
		}
		h.Log.Log(r.Context(), lvl, "admission", "allowed", v.Allowed, "rule", v.Rule, "user", req.UserInfo.Username,
			"node", CallerNode(extraOf(req)), "operation", req.Operation, "resource", req.Resource.Resource, "subresource", req.SubResource,
			"namespace", req.Namespace, "name", req.Name, "duration", time.Since(start), "message", v.Message)
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func extraOf(req *admissionv1.AdmissionRequest) map[string][]string {
	m := make(map[string][]string, len(req.UserInfo.Extra))
	for k, v := range req.UserInfo.Extra {
		m[k] = v
	}
	return m
}

// Judge gathers the facts a request is judged on and decides. Only the
// agent's requests are judged (the webhook configuration's matchConditions
// send no others); an error reading the facts refuses.
func (h *Handler) Judge(ctx context.Context, req *admissionv1.AdmissionRequest) Verdict {
	if !IsAgent(req.UserInfo.Username) {
		return Allow()
	}
	node := CallerNode(extraOf(req))
	if node == "" {
		return deny(RuleNodeBoundToken, "tenure-agent must use a service-account token bound to a pod on a node; this one is not, so it may write nothing")
	}
	v, err := h.judge(ctx, node, req)
	if err != nil {
		return deny(RuleFacts, "reading what the request is judged on: %v", err)
	}
	return v
}

func (h *Handler) judge(ctx context.Context, node string, req *admissionv1.AdmissionRequest) (Verdict, error) {
	res, op := req.Resource, req.Operation
	switch {
	case res.Group == tenurev1alpha1.GroupVersion.Group && res.Resource == "ipreservations" && req.SubResource == "" &&
		(op == admissionv1.Create || op == admissionv1.Delete):
		raw := req.Object.Raw
		if op == admissionv1.Delete {
			raw = req.OldObject.Raw
		}
		r := &tenurev1alpha1.IPReservation{}
		if err := json.Unmarshal(raw, r); err != nil {
			return Verdict{}, fmt.Errorf("decoding the reservation: %w", err)
		}
		o := r.Spec.Owner
		decide := func(pods []corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim, vmis kubevirt.Lookup) Verdict {
			if op == admissionv1.Create {
				return ReservationCreate(node, r, claim, pods, vmis)
			}
			return ReservationDelete(node, r, claim, pods, vmis)
		}
		if o.Kind != tenurev1alpha1.OwnerIPAMClaim {
			return decide(nil, nil, nil), nil
		}
		claim, err := h.claim(ctx, o.Namespace, o.Name)
		if err != nil {
			return Verdict{}, err
		}
		vmis, err := h.claimVMIs(ctx, claim)
		if err != nil {
			return Verdict{}, err
		}
		return h.namedPodsFirst(ctx, o.Namespace, node, []string{o.PodName}, func(pods []corev1.Pod) (Verdict, error) {
			return decide(pods, claim, vmis), nil
		})

	case res.Group == ipamclaimsv1alpha1.GroupVersion.Group && res.Resource == "ipamclaims" && req.SubResource == "" && op == admissionv1.Create:
		c := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := json.Unmarshal(req.Object.Raw, c); err != nil {
			return Verdict{}, fmt.Errorf("decoding the claim: %w", err)
		}
		if c.Namespace == "" {
			c.Namespace = req.Namespace
		}
		var pod *corev1.Pod
		if name := c.Annotations[claims.AnnotationPod]; name != "" {
			var err error
			if pod, err = h.pod(ctx, c.Namespace, name); err != nil {
				return Verdict{}, err
			}
		}
		return ClaimCreate(node, c, pod), nil

	case res.Group == ipamclaimsv1alpha1.GroupVersion.Group && res.Resource == "ipamclaims" && req.SubResource == "status" && op == admissionv1.Update:
		old, c := &ipamclaimsv1alpha1.IPAMClaim{}, &ipamclaimsv1alpha1.IPAMClaim{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return Verdict{}, fmt.Errorf("decoding the stored claim: %w", err)
		}
		if err := json.Unmarshal(req.Object.Raw, c); err != nil {
			return Verdict{}, fmt.Errorf("decoding the claim: %w", err)
		}
		// The claim's reservations, where the update adds items: a LIST,
		// which waits on the watch cache as the pods' does, and the ADDs
		// of a migration target or a restarted VM add none.
		var owned []tenurev1alpha1.IPReservation
		if AddsItems(old, c) {
			var err error
			if owned, err = h.ownedBy(ctx, string(c.UID)); err != nil {
				return Verdict{}, err
			}
		}
		// The pods a status write names: its ownerPod, and those whose ADDs
		// made the claim's items on this node.
		named := []string{ownerPod(c)}
		for i := range owned {
			if o := owned[i].Spec.Owner; o.Node == node {
				named = append(named, o.PodName)
			}
		}
		vmis, err := h.claimVMIs(ctx, c)
		if err != nil {
			return Verdict{}, err
		}
		return h.namedPodsFirst(ctx, c.Namespace, node, named, func(pods []corev1.Pod) (Verdict, error) {
			f := ClaimStatus{Pods: pods, Owned: owned, VMIs: vmis}
			if from, to := ownerPod(old), ownerPod(c); from != "" && to != "" && from != to {
				var err error
				if f.VMI, err = h.vmiOf(ctx, c, to, f.Pods); err != nil {
					return Verdict{}, err
				}
			}
			return ClaimStatusUpdate(node, old, c, f), nil
		})

	case (res.Group == "" || res.Group == "events.k8s.io") && res.Resource == "events" && req.SubResource == "" &&
		(op == admissionv1.Create || op == admissionv1.Update):
		raws := [][]byte{req.Object.Raw}
		if op == admissionv1.Update {
			raws = append(raws, req.OldObject.Raw)
		}
		var subjects []EventSubject
		for _, raw := range raws {
			s, err := eventSubject(raw, req.Namespace)
			if err != nil {
				return Verdict{}, err
			}
			e := EventSubject{Subject: s}
			switch s.Kind {
			case "Pod":
				if e.Pod, err = h.pod(ctx, s.Namespace, s.Name); err != nil {
					return Verdict{}, err
				}
			case "IPAMClaim":
				if e.Claim, err = h.claim(ctx, s.Namespace, s.Name); err != nil {
					return Verdict{}, err
				}
				if e.Pods, err = h.podsOn(ctx, s.Namespace, node); err != nil {
					return Verdict{}, err
				}
				if e.Claim != nil {
					if e.VMIs, err = h.claimVMIs(ctx, e.Claim); err != nil {
						return Verdict{}, err
					}
				}
			}
			subjects = append(subjects, e)
		}
		return EventWrite(node, subjects...), nil
	}
	return deny(RuleUnjudged, "the webhook does not judge %s %s/%s (subresource %q); its configuration sends it only what it judges",
		op, res.Group, res.Resource, req.SubResource), nil
}

// eventSubject reads involvedObject (core/v1) or regarding
// (events.k8s.io) of an Event.
func eventSubject(raw []byte, namespace string) (Subject, error) {
	var ev struct {
		Metadata       metav1.ObjectMeta       `json:"metadata"`
		InvolvedObject *corev1.ObjectReference `json:"involvedObject"`
		Regarding      *corev1.ObjectReference `json:"regarding"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		return Subject{}, fmt.Errorf("decoding the Event: %w", err)
	}
	ref := ev.InvolvedObject
	if ref == nil || ref.Kind == "" {
		ref = ev.Regarding
	}
	if ref == nil {
		return Subject{}, nil
	}
	s := Subject{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, UID: string(ref.UID)}
	if s.Namespace == "" {
		s.Namespace = ev.Metadata.Namespace
	}
	if s.Namespace == "" {
		s.Namespace = namespace
	}
	return s, nil
}

func (h *Handler) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	if err := h.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

func (h *Handler) claim(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := h.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading IPAMClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// namedPodsFirst decides on the pods of node in namespace that the request
// names (GETs) before all of them (a LIST): decide, on a subset of the
// node's pods, allows only what it allows on all of them (each rule reads
// pods for one that presents a claim, or is a given one; no pod makes it
// refuse), so what the named pods allow stands, and a refusal is decided
// again on all of them. The same verdict as the LIST alone, without its
// wait: the API server serves a LIST from its watch cache once the cache
// has caught up with etcd, and while anything else is written that takes
// it a progress notification from etcd, tens of milliseconds (a GET is
// read from etcd at once).
func (h *Handler) namedPodsFirst(ctx context.Context, namespace, node string, names []string, decide func([]corev1.Pod) (Verdict, error)) (Verdict, error) {
	var named []corev1.Pod
	for i, name := range names {
		if name == "" || slices.Contains(names[:i], name) {
			continue
		}
		p, err := h.pod(ctx, namespace, name)
		if err != nil {
			return Verdict{}, err
		}
		if p != nil && p.Spec.NodeName == node {
			named = append(named, *p)
		}
	}
	if len(named) > 0 {
		if v, err := decide(named); err != nil || v.Allowed {
			return v, err
		}
	}
	pods, err := h.podsOn(ctx, namespace, node)
	if err != nil {
		return Verdict{}, err
	}
	return decide(pods)
}

// podsOn lists the pods of node in namespace (a field selector the API
// server answers).
func (h *Handler) podsOn(ctx context.Context, namespace, node string) ([]corev1.Pod, error) {
	l := &corev1.PodList{}
	if err := h.Reader.List(ctx, l, client.InNamespace(namespace), client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, fmt.Errorf("listing the pods of node %s in namespace %s: %w", node, namespace, err)
	}
	return l.Items, nil
}

func (h *Handler) ownedBy(ctx context.Context, uid string) ([]tenurev1alpha1.IPReservation, error) {
	l := &tenurev1alpha1.IPReservationList{}
	if err := h.Reader.List(ctx, l, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		return nil, fmt.Errorf("listing the reservations of owner %s: %w", uid, err)
	}
	return l.Items, nil
}

// claimVMIs finds the VirtualMachineInstance of a KubeVirt VM's claim
// (claims.KubeVirtVMI), read once from the API server: a Lookup that
// finds it, or nothing where it does not exist; nil where the API serves
// no VMIs. For a claim of no VM it finds nothing (and is not asked).
func (h *Handler) claimVMIs(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) (kubevirt.Lookup, error) {
	if c == nil {
		return claims.LookupOf(nil), nil
	}
	name, ok := claims.KubeVirtVMI(c)
	if !ok {
		return claims.LookupOf(nil), nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kubevirt.VMIKind)
	err := h.Reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, u)
	switch {
	case meta.IsNoMatchError(err) || resourceNotServed(err):
		return nil, nil
	case apierrors.IsNotFound(err):
		return claims.LookupOf(nil), nil
	case err != nil:
		return nil, fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", c.Namespace, name, err)
	}
	v := kubevirt.FromUnstructured(u)
	return claims.LookupOf(&v), nil
}

// resourceNotServed tells the API server's 404 for a resource it does not
// serve (a CRD deleted after the client's REST mapper learnt it) from its
// 404 for an object that does not exist: the latter is a Status naming
// the object; the former is no Status at all (client-go then records the
// body as an unexpected server response) or one that names nothing.
func resourceNotServed(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	if d == nil || d.Name == "" {
		return true
	}
	for _, c := range d.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

// vmiOf is the VMI behind claim c and its new ownerPod (a pod of pods),
// nil where the API serves no VMIs or none runs on a node.
func (h *Handler) vmiOf(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim, podName string, pods []corev1.Pod) (*kubevirt.VMI, error) {
	var podOwners []metav1.OwnerReference
	for i := range pods {
		if pods[i].Name == podName {
			podOwners = pods[i].OwnerReferences
		}
	}
	var lookupErr error
	lookup := func(namespace, name string) (kubevirt.VMI, bool) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(kubevirt.VMIKind)
		err := h.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u)
		switch {
		case err == nil:
			return kubevirt.FromUnstructured(u), true
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		default:
			lookupErr = fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", namespace, name, err)
		}
		return kubevirt.VMI{}, false
	}
	vmi, ok := kubevirt.VMOf(lookup, c.Namespace, c.OwnerReferences, podOwners)
	if lookupErr != nil {
		return nil, lookupErr
	}
	if !ok {
		return nil, nil
	}
	return &vmi, nil
}
