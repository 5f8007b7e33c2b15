package ops

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
	"github.com/tenure-ipam/tenure/internal/config"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// AgentComponent is the Event source of tenure-agent; its Warning Events
// on a pod say "interface NAME" for the attachment whose ADD failed.
const AgentComponent = "tenure-agent"

// kubeletSandboxFailure is the kubelet's Event when a pod sandbox's CNI
// ADD (through Multus, any plugin's) failed.
const kubeletSandboxFailure = "FailedCreatePodSandBox"

// PodClaim is an IPAMClaim a pod presents, with what it owns.
type PodClaim struct {
	Name string
	// Claim is nil when no claim of that name exists.
	Claim        *ipamclaimsv1alpha1.IPAMClaim
	Reservations []*tenurev1alpha1.IPReservation
}

// AttachmentReport is the state of one attachment of a pod.
type AttachmentReport struct {
	Interface string `json:"interface"`
	// Network is the NetworkAttachmentDefinition (namespace/name) the
	// pod's networks annotation names for the interface.
	Network string `json:"network,omitempty"`
	// Scopes are the allocation scopes of the addresses held, each with
	// the CNI network name that made them beside it when it differs.
	Scopes []string `json:"scopes,omitempty"`
	Claim  string   `json:"claim,omitempty"`
	// Addresses are the addresses and prefixes held for it now.
	Addresses    []string `json:"addresses"`
	Reservations []string `json:"reservations,omitempty"`
	// OK: the attachment holds its addresses.
	OK bool `json:"ok"`
	// Outcome is the last allocation outcome, in words.
	Outcome string `json:"outcome"`
	// Pools are, for a network whose config lists pools, each pool's
	// verdict per family: which one the pod's ADD chooses, and why not the
	// others. PoolsProblem says why it chooses none, or why the choice
	// could not be worked out.
	Pools        []config.PoolVerdict `json:"pools,omitempty"`
	PoolsProblem string               `json:"poolsProblem,omitempty"`
}

// EventView is an Event on the pod or one of its claims.
type EventView struct {
	Time    metav1.Time `json:"time"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	From    string      `json:"from"`
	Object  string      `json:"object"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
}

// PodReport is Why's answer.
type PodReport struct {
	Namespace   string             `json:"namespace"`
	Name        string             `json:"name"`
	UID         string             `json:"uid"`
	Node        string             `json:"node,omitempty"`
	Phase       string             `json:"phase,omitempty"`
	Attachments []AttachmentReport `json:"attachments"`
	// Problem is set when the networks annotation does not parse.
	Problem string `json:"problem,omitempty"`
	// Fence, when the pod is terminating or terminal on a node that is not
	// Ready and not fenced, says that its addresses wait for the node to
	// be fenced and what would release them.
	Fence  string      `json:"fence,omitempty"`
	Events []EventView `json:"events"`

	now time.Time
}

// Why answers "why has this pod no address": for each attachment of the
// pod, what it holds (its reservations, or its claim's) and the last
// allocation outcome from the Events of tenure-agent, of the kubelet and on
// the claims. For a terminating or terminal pod it also says what its
// addresses wait for, judged by policy, the controller's flags.
func (c *Client) Why(ctx context.Context, namespace, name string, policy repair.Policy) (*PodReport, error) {
	pod := &corev1.Pod{}
	if err := c.c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %s/%s not found", namespace, name)
		}
		return nil, err
	}
	owned, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + string(pod.UID)})
	if err != nil {
		return nil, err
	}
	events, err := c.events(ctx, namespace, pod.UID)
	if err != nil {
		return nil, err
	}
	elems, _ := networkElements(pod)
	var pcs []PodClaim
	for _, e := range elems {
		if e.IPAMClaimReference == "" || slices.ContainsFunc(pcs, func(pc PodClaim) bool { return pc.Name == e.IPAMClaimReference }) {
			continue
		}
		pc := PodClaim{Name: e.IPAMClaimReference}
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		switch err := c.c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: pc.Name}, cl); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			pc.Claim = cl
			if pc.Reservations, err = c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + string(cl.UID)}); err != nil {
				return nil, err
			}
			ce, err := c.events(ctx, namespace, cl.UID)
			if err != nil {
				return nil, err
			}
			events = append(events, ce...)
		}
		pcs = append(pcs, pc)
	}
	rep := Explain(pod, owned, pcs, events, c.Now())
	if err := c.explainPools(ctx, pod, rep); err != nil {
		return nil, err
	}
	if pf := repair.PodFactOf(pod); (pf.Terminating || pf.Terminal) && pod.Spec.NodeName != "" {
		decisions := make([]repair.Decision, len(owned))
		for i, r := range owned {
			// The same live facts as tenurectl release reads: the node, and
			// under --release-unfenced what other nodes heard on the wire.
			facts, _, err := c.liveFacts(ctx, r)
			if err != nil {
				return nil, err
			}
			decisions[i] = repair.Decide(r, facts, policy)
		}
		rep.ExplainFence(owned, decisions, policy.ReleaseUnfenced)
	}
	return rep, nil
}

// explainPools reads what a pools list's choice depends on for each
// attachment whose NetworkAttachmentDefinition's tenure config lists
// pools, and has ExplainPools make it.
func (c *Client) explainPools(ctx context.Context, pod *corev1.Pod, rep *PodReport) error {
	configs := map[string]*config.Config{}
	for _, a := range rep.Attachments {
		if a.Network == "" || configs[a.Network] != nil {
			continue
		}
		ns, name, _ := strings.Cut(a.Network, "/")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(inventory.NADListGVK.GroupVersion().WithKind("NetworkAttachmentDefinition"))
		switch err := c.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); {
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
			continue
		case err != nil:
			return err
		}
		spec, _, _ := unstructured.NestedString(u.Object, "spec", "config")
		confs, _ := inventory.TenureConfigs(spec)
		for _, conf := range confs {
			if cfg, err := config.Parse(conf, nil); err == nil && cfg.Pools != nil {
				configs[a.Network] = cfg
			}
		}
	}
	if len(configs) == 0 {
		return nil
	}
	pools, err := c.pools(ctx)
	if err != nil {
		return err
	}
	at := config.Placement{Namespace: pod.Namespace, Node: pod.Spec.NodeName}
	ns := &corev1.Namespace{}
	if err := c.c.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
		return err
	}
	at.NamespaceLabels = ns.Labels
	if at.Node != "" {
		n := &corev1.Node{}
		switch err := c.c.Get(ctx, types.NamespacedName{Name: at.Node}, n); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			at.NodeLabels = n.Labels
		}
	}
	ExplainPools(rep, configs, pools, at)
	return nil
}

// ExplainPools fills in, for each attachment whose network's config (by
// NetworkAttachmentDefinition, in configs) lists pools, the choice the
// agent makes for the pod placed at: the pool of each family and why not
// the others, an address the attachment holds keeping its pool as on an
// ADD.
func ExplainPools(rep *PodReport, configs map[string]*config.Config, pools []tenurev1alpha1.IPPool, at config.Placement) {
	specs := map[string]*tenurev1alpha1.IPPoolSpec{}
	for i := range pools {
		specs[pools[i].Name] = &pools[i].Spec
	}
	for i := range rep.Attachments {
		a := &rep.Attachments[i]
		cfg := configs[a.Network]
		if cfg == nil {
			continue
		}
		if at.Node == "" {
			a.PoolsProblem = "the pod is not scheduled: its node decides the pool"
			continue
		}
		var held []netip.Addr
		for _, item := range a.Addresses {
			if p, err := reservation.ParseItem(item); err == nil && p.Bits() == p.Addr().BitLen() {
				held = append(held, p.Addr())
			}
		}
		_, choice, err := cfg.SelectPools(specs, at, held)
		a.Pools = choice.Verdicts
		if err != nil {
			a.PoolsProblem = err.Error()
		}
	}
}

// ExplainFence adds to the report of a terminating or terminal pod what
// the addresses of owned wait for, from the controller's decision about
// each (decisions[i] about owned[i]): the node to be fenced, and with
// unfenced (--release-unfenced) the grace period and the wire too; or that
// NodeNotReady releases them now.
func (r *PodReport) ExplainFence(owned []*tenurev1alpha1.IPReservation, decisions []repair.Decision, unfenced bool) {
	for i, res := range owned {
		d := decisions[i]
		var outcome string
		switch {
		case d.Release && d.Reason == repair.NodeNotReady:
			outcome = "; the controller releases it: " + d.Message
		case d.Release || d.Fence == "":
			continue
		case unfenced:
			outcome, r.Fence = "; kept: "+d.Message, d.Message
		default:
			outcome, r.Fence = "; kept: "+repair.FenceWait(d.Fence), d.Message
		}
		for i := range r.Attachments {
			if a := &r.Attachments[i]; a.Interface == res.Spec.Owner.Interface && !strings.Contains(a.Outcome, outcome) {
				a.Outcome += outcome
			}
		}
	}
}

func (c *Client) events(ctx context.Context, namespace string, uid types.UID) ([]corev1.Event, error) {
	l := &corev1.EventList{}
	if err := c.c.List(ctx, l, client.InNamespace(namespace), client.MatchingFields{"involvedObject.uid": string(uid)}); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// networkElements parses the pod's networks annotation; none without one.
func networkElements(pod *corev1.Pod) ([]*nadv1.NetworkSelectionElement, error) {
	if pod.Annotations[nadv1.NetworkAttachmentAnnot] == "" {
		return nil, nil
	}
	elems, err := nadutils.ParsePodNetworkAnnotation(pod)
	for _, e := range elems {
		if e.Namespace == "" {
			e.Namespace = pod.Namespace
		}
	}
	return elems, err
}

// interfaceInMessage finds "interface NAME" in an agent Event's message.
var interfaceInMessage = regexp.MustCompile(`\binterface ([^\s,:;()]+)`)

// Explain builds the report of a pod from what was read: the reservations
// it owns, the claims it presents, and the Events on it and its claims.
// The attachments are the elements of its networks annotation (Multus
// names unnamed interfaces net1, net2, ... in annotation order), and any
// other interface its reservations or the agent's Events name.
func Explain(pod *corev1.Pod, owned []*tenurev1alpha1.IPReservation, pcs []PodClaim, events []corev1.Event, now time.Time) *PodReport {
	rep := &PodReport{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Node: pod.Spec.NodeName, Phase: string(pod.Status.Phase), now: now,
		Attachments: []AttachmentReport{}, Events: []EventView{}}
	elems, err := networkElements(pod)
	if err != nil {
		rep.Problem = fmt.Sprintf("annotation %s does not parse: %v", nadv1.NetworkAttachmentAnnot, err)
	}
	slices.SortFunc(events, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b).Time) })
	for _, e := range events {
		rep.Events = append(rep.Events, EventView{
			Time: eventTime(e), Type: e.Type, Reason: e.Reason, From: strings.TrimSuffix(e.Source.Component+", "+e.Source.Host, ", "),
			Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, Message: e.Message, Count: e.Count,
		})
	}

	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for i, e := range elems {
		add(cmp.Or(e.InterfaceRequest, "net"+strconv.Itoa(i+1)))
	}
	for _, r := range owned {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerPod && r.Spec.Owner.UID == string(pod.UID) {
			add(r.Spec.Owner.Interface)
		}
	}
	for _, e := range events {
		if m := interfaceInMessage.FindStringSubmatch(e.Message); m != nil && e.Source.Component == AgentComponent {
			add(m[1])
		}
	}
	rep.Attachments = make([]AttachmentReport, len(names))
	for i, n := range names {
		rep.Attachments[i] = AttachmentReport{Interface: n, Addresses: []string{}}
	}
	attachment := func(ifName string) *AttachmentReport { return &rep.Attachments[slices.Index(names, ifName)] }

	newest := map[string]*tenurev1alpha1.IPReservation{}
	hold := func(a *AttachmentReport, r *tenurev1alpha1.IPReservation) {
		a.Addresses = append(a.Addresses, r.Spec.Address)
		a.Reservations = append(a.Reservations, r.Name)
		if sc := networkCell(r.Spec.Network, r.Spec.CNINetwork); !slices.Contains(a.Scopes, sc) {
			a.Scopes = append(a.Scopes, sc)
		}
		if n := newest[a.Interface]; n == nil || r.CreationTimestamp.After(n.CreationTimestamp.Time) {
			newest[a.Interface] = r
		}
	}
	for i, e := range elems {
		a := attachment(cmp.Or(e.InterfaceRequest, "net"+strconv.Itoa(i+1)))
		a.Network = e.Namespace + "/" + e.Name
		a.Claim = e.IPAMClaimReference
		for _, pc := range pcs {
			if pc.Name == a.Claim {
				for _, r := range pc.Reservations {
					hold(a, r)
				}
			}
		}
	}
	for _, r := range owned {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerPod && r.Spec.Owner.UID == string(pod.UID) {
			hold(attachment(r.Spec.Owner.Interface), r)
		}
	}
	for i := range rep.Attachments {
		a := &rep.Attachments[i]
		a.OK, a.Outcome = outcome(pod, a, newest[a.Interface], pcs, events, now)
	}
	return rep
}

// outcome says the last allocation outcome of one attachment.
func outcome(pod *corev1.Pod, a *AttachmentReport, newest *tenurev1alpha1.IPReservation, pcs []PodClaim, events []corev1.Event, now time.Time) (bool, string) {
	var failed *corev1.Event // the agent's newest Warning for this interface
	var sandbox *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.UID != pod.UID {
			continue
		}
		if m := interfaceInMessage.FindStringSubmatch(e.Message); e.Source.Component == AgentComponent && m != nil && m[1] == a.Interface {
			failed = e
		}
		if e.Reason == kubeletSandboxFailure {
			sandbox = e
		}
	}
	ago := func(t time.Time) string { return duration.HumanDuration(now.Sub(t)) + " ago" }
	deleting := claimDeletion(pod.Namespace, a.Claim, pcs)
	if newest != nil {
		s := fmt.Sprintf("allocated %s %s on node %s", strings.Join(a.Addresses, ", "), ago(newest.CreationTimestamp.Time), orNone(newest.Spec.Owner.Node))
		if failed != nil && eventTime(*failed).After(newest.CreationTimestamp.Time) {
			s += fmt.Sprintf("; a later ADD failed %s: %s", ago(eventTime(*failed).Time), failed.Message)
		}
		return true, s + deleting
	}
	if failed != nil {
		return false, fmt.Sprintf("ADD failed %s on node %s: %s", ago(eventTime(*failed).Time), orNone(failed.Source.Host), failed.Message) + deleting
	}
	for _, pc := range pcs {
		if pc.Name != a.Claim {
			continue
		}
		if pc.Claim == nil {
			return false, fmt.Sprintf("IPAMClaim %s/%s does not exist", pod.Namespace, pc.Name)
		}
		if c := meta.FindStatusCondition(pc.Claim.Status.Conditions, ipamclaimsv1alpha1.ConditionIPsAllocated); c != nil && c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("IPAMClaim %s/%s: %s: %s", pod.Namespace, pc.Name, c.Reason, c.Message)
		}
	}
	switch {
	case pod.Spec.NodeName == "":
		return false, "the pod is not scheduled to a node: no ADD yet"
	case sandbox != nil:
		return false, fmt.Sprintf("the pod's sandbox failed %s (%s): %s", ago(eventTime(*sandbox).Time), sandbox.Reason, sandbox.Message)
	}
	return false, "no ADD has reached tenure for this interface: no reservation and no Event"
}

// claimDeletion is "; IPAMClaim NS/NAME: claim is being deleted; waiting
// for ..." when the attachment's claim is being deleted, "" otherwise.
func claimDeletion(namespace, claim string, pcs []PodClaim) string {
	for _, pc := range pcs {
		if pc.Name != claim || claim == "" || pc.Claim == nil || pc.Claim.DeletionTimestamp == nil {
			continue
		}
		var items []string
		for _, r := range pc.Reservations {
			if r.Spec.Owner.Kind == tenurev1alpha1.OwnerIPAMClaim && r.Spec.Owner.UID == string(pc.Claim.UID) {
				items = append(items, r.Spec.Address)
			}
		}
		return fmt.Sprintf("; IPAMClaim %s/%s: %s", namespace, pc.Name, claims.DeletionMessage(pc.Claim, items))
	}
	return ""
}

// eventTime is when an Event last happened, whichever of its times the
// recorder set.
func eventTime(e corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp
	}
	return e.CreationTimestamp
}

// WriteTable writes the pod, its attachments and its Events.
func (r *PodReport) WriteTable(w io.Writer, wide bool) error {
	fmt.Fprintf(w, "Pod %s/%s (uid %s) on node %s, phase %s\n", r.Namespace, r.Name, r.UID, orNone(r.Node), orNone(r.Phase))
	if r.Problem != "" {
		fmt.Fprintf(w, "problem: %s\n", r.Problem)
	}
	if r.Fence != "" {
		fmt.Fprintf(w, "addresses kept: %s\n", r.Fence)
	}
	if len(r.Attachments) == 0 {
		fmt.Fprintln(w, "No attachments: no networks annotation, no reservation, no Event of tenure-agent.")
	} else {
		t := newTable(w, wide, []string{"INTERFACE", "NETWORK", "SCOPE", "CLAIM", "ADDRESSES", "OUTCOME"}, "RESERVATIONS")
		for _, a := range r.Attachments {
			t.row([]string{a.Interface, orNone(a.Network), orNone(strings.Join(a.Scopes, ",")), orNone(a.Claim), orNone(strings.Join(a.Addresses, ",")), a.Outcome}, orNone(strings.Join(a.Reservations, ",")))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if err := r.writePools(w); err != nil {
			return err
		}
	}
	if len(r.Events) == 0 {
		_, err := fmt.Fprintln(w, "Events: <none>")
		return err
	}
	fmt.Fprintln(w, "Events:")
	t := newTable(w, false, []string{"  AGE", "TYPE", "REASON", "FROM", "OBJECT", "MESSAGE"})
	for _, e := range r.Events {
		t.row([]string{"  " + duration.HumanDuration(r.now.Sub(e.Time.Time)), e.Type, e.Reason, orNone(e.From), e.Object, e.Message})
	}
	return t.flush()
}

// writePools writes, for each attachment of a pools list, the pool chosen
// per family and why the others were not.
func (r *PodReport) writePools(w io.Writer) error {
	for _, a := range r.Attachments {
		if len(a.Pools) == 0 && a.PoolsProblem == "" {
			continue
		}
		fmt.Fprintf(w, "Pools of %s (%s):\n", a.Interface, a.Network)
		if a.PoolsProblem != "" {
			fmt.Fprintf(w, "  none chosen: %s\n", a.PoolsProblem)
		}
		t := newTable(w, false, []string{"  FAMILY", "POOL", "CHOSEN", "WHY"})
		for _, v := range a.Pools {
			chosen := "no"
			if v.Chosen {
				chosen = "yes"
			}
			t.row([]string{"  " + v.Family, v.Pool, chosen, v.Reason})
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}
