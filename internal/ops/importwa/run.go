package importwa

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/ops"
)

// Group is whereabouts' API group; its objects are read as v1alpha1.
const Group = "whereabouts.cni.cncf.io"

var (
	poolListGVK        = schema.GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "IPPoolList"}
	overlappingListGVK = schema.GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "OverlappingRangeIPReservationList"}
)

// Options of Run.
type Options struct {
	// Apply writes the reservations; without it Run only reports.
	Apply bool
	// Progress, when set, is called as allocations are resolved (phase
	// "resolving") and reservations written ("writing").
	Progress func(phase string, done, total int)
}

// Run reads whereabouts' IPPools and OverlappingRangeIPReservations and the
// NetworkAttachmentDefinitions in every namespace, the tenure reservations
// and, live, each allocation's pod; with Apply it creates the reservations
// of the Create entries. c must know tenure's types (kube.Scheme).
func Run(ctx context.Context, c client.Client, opts Options) (*Report, error) {
	in, err := read(ctx, c)
	if err != nil {
		return nil, err
	}
	pods := map[string]podLookup{}
	lookup := func(ref string) (Pod, bool, error) {
		if l, ok := pods[ref]; ok {
			return l.pod, l.ok, nil
		}
		ns, name, _ := strings.Cut(ref, "/")
		p := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)
		var l podLookup
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return Pod{}, false, err
		default:
			l = podLookup{Pod{UID: string(p.UID), Node: p.Spec.NodeName, Addresses: networkStatus(p)}, true}
		}
		pods[ref] = l
		return l.pod, l.ok, nil
	}
	var progress func(done, total int)
	if opts.Progress != nil {
		progress = func(done, total int) { opts.Progress("resolving", done, total) }
	}
	rep, err := Plan(*in, lookup, progress)
	if err != nil || !opts.Apply {
		return rep, err
	}
	return rep, apply(ctx, c, rep, opts.Progress)
}

// networkStatus reads the IPs of each interface from the pod's
// network-status annotation; nil when it has none or it does not parse.
func networkStatus(p *corev1.Pod) map[string][]string {
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(p.Annotations[nadv1.NetworkStatusAnnot]), &st); err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, s := range st {
		if s.Interface != "" {
			out[s.Interface] = append(out[s.Interface], s.IPs...)
		}
	}
	return out
}

type podLookup struct {
	pod Pod
	ok  bool
}

// apply creates the reservation of every Create entry. One that appeared
// meanwhile is what a second run would find: Exists when the pod holds it,
// a Conflict otherwise.
func apply(ctx context.Context, c client.Client, rep *Report, progress func(string, int, int)) error {
	total, done := rep.Count(Create), 0
	rep.Applied = true
	for i := range rep.Entries {
		e := &rep.Entries[i]
		if e.Action != Create {
			continue
		}
		obj := e.Object()
		err := c.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			cur := &tenurev1alpha1.IPReservation{}
			if err = c.Get(ctx, client.ObjectKey{Name: obj.Name}, cur); err == nil {
				resolveExisting(e, cur.Spec.Owner)
			}
		} else if err == nil {
			e.Action = Created
		}
		if err != nil {
			return fmt.Errorf("creating reservation %s for %s: %w", obj.Name, e.PodRef, err)
		}
		done++
		if progress != nil {
			progress("writing", done, total)
		}
	}
	return nil
}

func resolveExisting(e *Entry, cur tenurev1alpha1.ReservationOwner) {
	if cur.UID == e.PodUID {
		e.Action, e.Detail = Exists, "already held by this pod"
		return
	}
	e.Action = Conflict
	e.Holder = &cur
	e.Detail = fmt.Sprintf("held by %s %s/%s (uid %s)", cur.Kind, cur.Namespace, cur.Name, cur.UID)
}

// read lists what Plan maps. A cluster without whereabouts' or Multus'
// CRDs has none of their objects.
func read(ctx context.Context, c client.Client) (*Inputs, error) {
	in := &Inputs{Existing: map[string]tenurev1alpha1.ReservationOwner{}}
	err := list(ctx, c, inventory.NADListGVK, func(u *unstructured.Unstructured) {
		in.NetworkConfigs = append(in.NetworkConfigs, inventory.NetworkConfigOf(u))
	})
	if err != nil {
		return nil, fmt.Errorf("listing NetworkAttachmentDefinitions: %w", err)
	}
	err = list(ctx, c, poolListGVK, func(u *unstructured.Unstructured) {
		p := Pool{Namespace: u.GetNamespace(), Name: u.GetName()}
		p.Range, _, _ = unstructured.NestedString(u.Object, "spec", "range")
		allocs, _, _ := unstructured.NestedMap(u.Object, "spec", "allocations")
		for off, v := range allocs {
			m, _ := v.(map[string]any)
			p.Allocations = append(p.Allocations, Allocation{Offset: off, ContainerID: str(m, "id"), PodRef: str(m, "podref"), IfName: str(m, "ifname")})
		}
		in.Pools = append(in.Pools, p)
	})
	if err != nil {
		return nil, fmt.Errorf("listing whereabouts IPPools: %w", err)
	}
	err = list(ctx, c, overlappingListGVK, func(u *unstructured.Unstructured) {
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		in.Overlapping = append(in.Overlapping, Overlapping{Namespace: u.GetNamespace(), Name: u.GetName(),
			ContainerID: str(spec, "containerid"), PodRef: str(spec, "podref"), IfName: str(spec, "ifname")})
	})
	if err != nil {
		return nil, fmt.Errorf("listing whereabouts OverlappingRangeIPReservations: %w", err)
	}
	opts := &client.ListOptions{Limit: ops.DefaultPageSize}
	for {
		l := &tenurev1alpha1.IPReservationList{}
		if err := c.List(ctx, l, opts); err != nil {
			return nil, fmt.Errorf("listing IPReservations: %w", err)
		}
		for i := range l.Items {
			in.Existing[l.Items[i].Name] = l.Items[i].Spec.Owner
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			return in, nil
		}
	}
}

// list pages through every object of gvk in every namespace.
func list(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, fn func(*unstructured.Unstructured)) error {
	opts := &client.ListOptions{Limit: ops.DefaultPageSize}
	for {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk)
		err := c.List(ctx, l, opts)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range l.Items {
			fn(&l.Items[i])
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// WriteTable writes the entries as kubectl get does, then what was
// skipped and a summary line.
func (r *Report) WriteTable(w io.Writer, wide bool) error {
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	cols := []string{"ACTION", "ADDRESS", "NETWORK", "POD", "INTERFACE", "NODE", "DETAIL"}
	if wide {
		cols = append(cols, "CONTAINER", "RANGE", "RESERVATION", "SOURCES")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, e := range r.Entries {
		cells := []string{string(e.Action), e.Address, e.Network, e.PodRef, orNone(e.Interface), orNone(e.Node), orNone(e.Detail)}
		if wide {
			cells = append(cells, orNone(e.ContainerID), orNone(e.Range), orNone(e.Reservation), strings.Join(e.Sources, ", "))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Skipped {
		if _, err := fmt.Fprintf(w, "skipped %s\n", s); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, r.Summary())
	return err
}

// Summary is the report in one line.
func (r *Report) Summary() string {
	var parts []string
	if r.Applied {
		parts = append(parts, fmt.Sprintf("%d created", r.Count(Created)))
	} else {
		parts = append(parts, fmt.Sprintf("%d to create (dry run: --apply writes them)", r.Count(Create)))
	}
	parts = append(parts,
		fmt.Sprintf("%d already imported", r.Count(Exists)),
		fmt.Sprintf("%d skipped (pod gone)", r.Count(PodGone)),
		fmt.Sprintf("%d skipped (out of range)", r.Count(OutOfRange)),
		fmt.Sprintf("%d skipped (stale sandbox)", r.Count(Stale)),
		fmt.Sprintf("%d refused (another owner)", r.Count(Conflict)))
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
