package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// RuleAddressConflict: something on the wire answered for a free address
// of a network (an agent's reservation.EventAddressConflict Event), and
// no reservation has taken the address since: a host tenure did not give
// it to holds it, and tenure hands it out to nobody while it answers.
const RuleAddressConflict = Rule("AddressConflict")

// addressConflictEvents lists the agents' AddressConflict Events; an
// error (Events not readable with the caller's rights) is a note.
func (c *Client) addressConflictEvents(ctx context.Context) ([]corev1.Event, string) {
	var out []corev1.Event
	opts := metav1.ListOptions{FieldSelector: "reason=" + reservation.EventAddressConflict}
	err := c.each(ctx, "Events", func() client.ObjectList { return &corev1.EventList{} }, opts, func(o runtime.Object) error {
		out = append(out, *o.(*corev1.Event))
		return nil
	})
	if err != nil {
		return nil, fmt.Sprintf("Events could not be listed, so addresses answering on the wire are not reported: %v", err)
	}
	return out, ""
}

// FindAddressConflicts reports each (network, address) that events say
// answered on the wire, unless a reservation of that address on that
// network was created after the last of them (a later probe found it
// silent, and it was handed out).
func FindAddressConflicts(events []corev1.Event, rs []*tenurev1alpha1.IPReservation) []Finding {
	type key struct{ network, address string }
	type seen struct {
		last  time.Time
		count int32
		macs  []string
		ev    *corev1.Event
	}
	by := map[key]*seen{}
	for i := range events {
		e := &events[i]
		k := key{e.Annotations[reservation.AnnotationConflictNetwork], e.Annotations[reservation.AnnotationConflictAddress]}
		if e.Reason != reservation.EventAddressConflict || k.network == "" || k.address == "" {
			continue
		}
		s := by[k]
		if s == nil {
			s = &seen{}
			by[k] = s
		}
		at := eventTime(*e).Time
		if s.ev == nil || at.After(s.last) {
			s.last, s.ev = at, e
		}
		s.count += max(e.Count, 1)
		if mac := e.Annotations[reservation.AnnotationConflictMAC]; mac != "" && !slices.Contains(s.macs, mac) {
			s.macs = append(s.macs, mac)
		}
	}
	for _, r := range rs {
		s := by[key{r.Spec.CNINetwork, r.Spec.Address}]
		if s != nil && r.CreationTimestamp.After(s.last) {
			delete(by, key{r.Spec.CNINetwork, r.Spec.Address})
		}
	}
	var out []Finding
	for k, s := range by {
		slices.Sort(s.macs)
		node := s.ev.Source.Host
		if node == "" {
			node = s.ev.ReportingInstance
		}
		out = append(out, Finding{
			Rule: RuleAddressConflict, Object: "Event " + s.ev.Namespace + "/" + s.ev.Name, Network: k.network, Address: k.address,
			Message: fmt.Sprintf("%s answered on the wire from MAC %s (%d times, last at %s, probed by node %s on %s) though no reservation holds it: "+
				"tenure hands it out to nobody while it answers; find the host by its MAC, or exclude the address from the range",
				k.address, strings.Join(s.macs, ", "), s.count, s.last.UTC().Format(time.RFC3339), node, s.ev.Annotations[reservation.AnnotationConflictInterface]),
			Related: []string{fmt.Sprintf("%s %s/%s", s.ev.InvolvedObject.Kind, s.ev.InvolvedObject.Namespace, s.ev.InvolvedObject.Name)},
		})
	}
	return out
}

// RuleAddressAnswers: an address the controller would release as
// NodeNotReady (--release-unfenced) is kept because an agent of another
// node heard it answer on the wire, in answer to the current request of
// its IPProbe: the NotReady node, or something else, still uses it.
const RuleAddressAnswers = Rule("AddressAnswers")

// probes lists the IPProbes by name; an error (no IPProbe CRD, no right
// to list them) is a note.
func (c *Client) probes(ctx context.Context) (map[string]*tenurev1alpha1.IPProbe, string) {
	out := map[string]*tenurev1alpha1.IPProbe{}
	err := c.each(ctx, "IPProbes", func() client.ObjectList { return &tenurev1alpha1.IPProbeList{} }, metav1.ListOptions{}, func(o runtime.Object) error {
		p := o.(*tenurev1alpha1.IPProbe)
		out[p.Name] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Sprintf("IPProbes could not be listed, so addresses a NodeNotReady release waits on are not reported: %v", err)
	}
	return out, ""
}

// FindAddressesAnswering reports each reservation whose IPProbe an agent
// of a node other than the reservation's answered, for its current
// request, with a MAC that answered for the address.
func FindAddressesAnswering(rs []*tenurev1alpha1.IPReservation, facts OwnerFacts) []Finding {
	var out []Finding
	for _, r := range rs {
		p := facts.Probes[r.Name]
		if p == nil {
			continue
		}
		for _, a := range facts.wire(r).Answers {
			if a.Result != tenurev1alpha1.ProbeAnswered {
				continue
			}
			o := r.Spec.Owner
			out = append(out, Finding{
				Rule: RuleAddressAnswers, Object: reservationObject(r), Network: r.Spec.Network, Address: r.Spec.Address,
				Message: fmt.Sprintf("%s of %s on NotReady node %s answers on the wire from MAC %s (%s, heard by node %s on %s, asked at %s): "+
					"the controller keeps it while it answers; the node still runs the pod, or another host holds the address",
					r.Spec.Address, ownerText(o), o.Node, a.MAC, a.Kind, a.Node, a.Interface, p.Spec.AskedAt.UTC().Format(time.RFC3339)),
				Related: []string{"IPProbe " + p.Name},
			})
			break
		}
	}
	return out
}
