package ops

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/controller/repair"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// DefaultNodeGracePeriod is tenure-controller's --node-grace-period
// default: with --release-unfenced, how long a node must have been
// NotReady before the terminating pods on it lose their addresses.
const DefaultNodeGracePeriod = 5 * time.Minute

// CheckOptions tune Check.
type CheckOptions struct {
	// ReleaseUnfenced and NodeGracePeriod are the controller's, for
	// RuleOwnerGone.
	ReleaseUnfenced bool
	NodeGracePeriod time.Duration
}

// CheckCounts is what Check read.
type CheckCounts struct {
	Reservations   int `json:"reservations"`
	Claims         int `json:"ipamClaims"`
	Pods           int `json:"pods"`
	Nodes          int `json:"nodes"`
	Pools          int `json:"ipPools"`
	NetworkConfigs int `json:"networkConfigs"`
	// RangeUnknown counts reservations whose scope no configuration
	// describes and whose recorded range does not parse: their range was
	// not checked.
	RangeUnknown int `json:"rangeUnknown"`
}

// CheckReport is Check's answer.
type CheckReport struct {
	Counts   CheckCounts `json:"counts"`
	Findings []Finding   `json:"findings"`
	// Notes are configurations that could not be read.
	Notes []string `json:"notes,omitempty"`
}

// OK reports whether nothing is wrong.
func (r *CheckReport) OK() bool { return len(r.Findings) == 0 }

// Check reads every reservation, IPAMClaim, pod and node, the declared
// IPPools and the network configurations, and reports what is wrong (see
// Rule). The lists are paged; pods are read as metadata only (full pods
// are read for the few a NotReady or deleted node makes matter).
//
// Reservations are listed first: an owner listed later that is missing
// was gone after its reservation was listed, so RuleOwnerGone needs no
// second look. A claim's status is written after its reservations, so a
// RuleClaimMismatch is confirmed by reading the claim and its reservations
// again and dropped when it no longer holds.
func (c *Client) Check(ctx context.Context, opts CheckOptions) (*CheckReport, error) {
	if opts.NodeGracePeriod == 0 {
		opts.NodeGracePeriod = DefaultNodeGracePeriod
	}
	rep := &CheckReport{Findings: []Finding{}}
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	rep.Counts.Pools, rep.Counts.NetworkConfigs, rep.Notes = inv.Pools, inv.NetworkConfigs, inv.Notes

	shapes := map[string]error{}
	rs, err := c.reservationsShaped(ctx, metav1.ListOptions{}, shapes)
	if err != nil {
		return nil, fmt.Errorf("listing reservations: %w", err)
	}
	facts := OwnerFacts{Pods: map[string]*repair.PodFact{}, Claims: map[string]*repair.ClaimFact{}, Nodes: map[string]*repair.NodeFact{},
		ByOwner: map[string][]*tenurev1alpha1.IPReservation{}, NetworkStatus: map[string]*repair.NetworkStatus{}}
	byItem := map[netip.Prefix][]*tenurev1alpha1.IPReservation{}
	for _, r := range rs {
		facts.ByOwner[r.Spec.Owner.UID] = append(facts.ByOwner[r.Spec.Owner.UID], r)
		if item, ok := itemOf(r); ok {
			byItem[item.Masked()] = append(byItem[item.Masked()], r)
		}
	}

	var claimList []ipamclaimsv1alpha1.IPAMClaim
	err = c.each(ctx, "IPAMClaims", func() client.ObjectList { return &ipamclaimsv1alpha1.IPAMClaimList{} }, metav1.ListOptions{}, func(o runtime.Object) error {
		cl := o.(*ipamclaimsv1alpha1.IPAMClaim)
		claimList = append(claimList, *cl)
		facts.Claims[cl.Namespace+"/"+cl.Name] = repair.ClaimFactOf(cl)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing IPAMClaims: %w", err)
	}
	// The rules that weigh a pod's reservations against each other read
	// the node it runs on (only a sibling made there counts) and its
	// network-status (which one it uses): the pods whose reservations
	// have siblings are read whole.
	siblings := map[string]bool{}
	for _, r := range rs {
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerPod && len(facts.ByOwner[r.Spec.Owner.UID]) > 1 {
			siblings[r.Spec.Owner.UID] = true
		}
	}
	var whole []types.NamespacedName
	err = c.podMeta(ctx, func(m *metav1.PartialObjectMetadata) {
		key := m.Namespace + "/" + m.Name
		facts.Pods[key] = &repair.PodFact{Exists: true, UID: string(m.UID), Terminating: m.DeletionTimestamp != nil}
		if siblings[string(m.UID)] {
			whole = append(whole, types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	for _, key := range whole {
		pod := &corev1.Pod{}
		found, err := c.getIfExists(ctx, key, pod)
		if err != nil {
			return nil, err
		}
		if found {
			facts.Pods[key.String()] = repair.PodFactOf(pod)
			facts.NetworkStatus[key.String()] = repair.NetworkStatusOf(pod.Annotations)
		} else {
			delete(facts.Pods, key.String())
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		facts.Nodes[nodes.Items[i].Name] = repair.NodeFactOf(&nodes.Items[i])
	}
	if err := c.podsOnLostNodes(ctx, rs, facts); err != nil {
		return nil, err
	}
	probes, note := c.probes(ctx)
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	facts.Probes = probes
	rep.Counts.Reservations, rep.Counts.Claims, rep.Counts.Pods, rep.Counts.Nodes = len(rs), len(claimList), len(facts.Pods), len(nodes.Items)

	rep.Findings = append(rep.Findings, FindDuplicates(rs)...)
	rep.Findings = append(rep.Findings, FindOverlaps(rs)...)
	rep.Findings = append(rep.Findings, FindOwnersGone(rs, facts, repair.Policy{ReleaseUnfenced: opts.ReleaseUnfenced, NodeGracePeriod: opts.NodeGracePeriod}, c.Now())...)
	rep.Findings = append(rep.Findings, FindDuplicateAttachments(rs, facts, repair.Policy{ReleaseUnfenced: opts.ReleaseUnfenced, NodeGracePeriod: opts.NodeGracePeriod}, c.Now())...)
	mismatches, err := c.confirmClaimMismatches(ctx, FindClaimMismatches(claimList, facts.ByOwner, byItem), byItem)
	if err != nil {
		return nil, err
	}
	rep.Findings = append(rep.Findings, mismatches...)
	unrecorded, notes, err := c.prefixFindings(ctx, claimList, facts.ByOwner)
	if err != nil {
		return nil, err
	}
	rep.Findings = append(rep.Findings, unrecorded...)
	rep.Notes = append(rep.Notes, notes...)
	outside, unknown := FindOutsideRanges(rs, inv)
	rep.Findings = append(rep.Findings, outside...)
	rep.Counts.RangeUnknown = unknown
	rep.Findings = append(rep.Findings, FindMalformed(rs, shapes)...)
	events, note := c.addressConflictEvents(ctx)
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	rep.Findings = append(rep.Findings, FindAddressConflicts(events, rs)...)
	rep.Findings = append(rep.Findings, FindAddressesAnswering(rs, facts)...)
	if len(inv.Listed) > 0 {
		missing, note := c.poolSchemaMissing(ctx)
		if note != "" {
			rep.Notes = append(rep.Notes, note)
		}
		rep.Findings = append(rep.Findings, FindStalePoolSchema(inv, missing)...)
	}
	sortFindings(rep.Findings)
	return rep, nil
}

// podsOnLostNodes completes the pod facts that metadata cannot give (node
// and phase) for the pods whose reservations name a node that is gone or
// not Ready: only there does repair.Decide look at them.
func (c *Client) podsOnLostNodes(ctx context.Context, rs []*tenurev1alpha1.IPReservation, facts OwnerFacts) error {
	want := map[types.NamespacedName]bool{}
	for _, r := range rs {
		o := r.Spec.Owner
		if o.Kind != tenurev1alpha1.OwnerPod || o.Node == "" {
			continue
		}
		if n := facts.Nodes[o.Node]; n != nil && n.Ready {
			continue
		}
		if p := facts.Pods[o.Namespace+"/"+o.Name]; p != nil && p.UID == o.UID {
			want[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = true
		}
	}
	type read struct {
		key  string
		fact *repair.PodFact
	}
	reads := make(chan read, len(want))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for key := range want {
		g.Go(func() error {
			p := &corev1.Pod{}
			err := c.c.Get(gctx, key, p)
			if apierrors.IsNotFound(err) {
				p = nil
			} else if err != nil {
				return err
			}
			reads <- read{key.String(), repair.PodFactOf(p)}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("reading pods on lost nodes: %w", err)
	}
	close(reads)
	for r := range reads {
		facts.Pods[r.key] = r.fact
	}
	return nil
}

// confirmClaimMismatches reads each claim with findings and its
// reservations again and keeps what still disagrees; byItem, from the
// listed reservations, only names other holders in messages.
func (c *Client) confirmClaimMismatches(ctx context.Context, fs []Finding, byItem map[netip.Prefix][]*tenurev1alpha1.IPReservation) ([]Finding, error) {
	claimsWith := map[string]bool{}
	for _, f := range fs {
		claimsWith[strings.TrimPrefix(f.Object, "IPAMClaim ")] = true
	}
	var out []Finding
	for key := range claimsWith {
		ns, name, _ := strings.Cut(key, "/")
		cl := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cl); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		owned, err := c.reservations(ctx, metav1.ListOptions{LabelSelector: reservation.LabelOwnerUID + "=" + string(cl.UID)})
		if err != nil {
			return nil, err
		}
		out = append(out, claimMismatches(cl, owned, byItem)...)
	}
	return out, nil
}

// WriteTable writes the findings as a table and a summary line.
func (r *CheckReport) WriteTable(w io.Writer, wide bool) error {
	if err := writeNotes(w, r.Notes); err != nil {
		return err
	}
	if len(r.Findings) > 0 {
		t := newTable(w, wide, []string{"RULE", "OBJECT", "ADDRESS", "MESSAGE"}, "NETWORK", "RELATED")
		for _, f := range r.Findings {
			t.row([]string{string(f.Rule), f.Object, orNone(f.Address), f.Message}, orNone(f.Network), orNone(strings.Join(f.Related, ",")))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	k := r.Counts
	verdict := "no problems"
	if n := len(r.Findings); n == 1 {
		verdict = "1 problem"
	} else if n > 1 {
		verdict = fmt.Sprintf("%d problems", n)
	}
	_, err := fmt.Fprintf(w, "checked %d reservations, %d IPAMClaims, %d pods, %d nodes, %d IPPools, %d network configurations: %s\n",
		k.Reservations, k.Claims, k.Pods, k.Nodes, k.Pools, k.NetworkConfigs, verdict)
	if err == nil && k.RangeUnknown > 0 {
		_, err = fmt.Fprintf(w, "%d reservations of networks no configuration describes, with no readable range, were not checked against a range\n", k.RangeUnknown)
	}
	return err
}
