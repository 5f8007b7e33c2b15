package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// benchPod is a pod bound to a node, as the kubelet sees it before ADD.
type benchPod struct {
	ns, name, uid, node, containerID string
}

func (p benchPod) args() string { return testbed.PodArgs(p.ns, p.name, p.uid) }

// createPods creates n pods spread round-robin over nodes.
func (e *env) createPods(ctx context.Context, prefix string, nodes []string, n int, annotations func(i int) map[string]string) ([]benchPod, error) {
	out := make([]benchPod, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(48)
	for i := range n {
		g.Go(func() error {
			seq := e.podSeq.Add(1)
			name := fmt.Sprintf("%s-%d", prefix, seq)
			var ann map[string]string
			if annotations != nil {
				ann = annotations(i)
			}
			node := nodes[i%len(nodes)]
			p, err := testbed.CreatePod(gctx, e.c, benchNamespace, name, node, ann)
			if err != nil {
				return fmt.Errorf("creating pod %s: %w", name, err)
			}
			out[i] = benchPod{ns: benchNamespace, name: name, uid: string(p.UID), node: node, containerID: fmt.Sprintf("sandbox-%d-%s", seq, p.UID)}
			return nil
		})
	}
	return out, g.Wait()
}

// deletePods force-deletes pods (there is no kubelet to finish a graceful
// delete).
func (e *env) deletePods(ctx context.Context, pods []benchPod) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, p := range pods {
		g.Go(func() error { return testbed.ForceDeletePod(gctx, e.c, p.ns, p.name) })
	}
	return g.Wait()
}

// owner returns the i-th owner pod on the filler node, creating owner
// pods as needed; reservations made directly through the API are spread
// perOwner to a pod.
func (e *env) ensureOwners(ctx context.Context, reservations int) ([]benchPod, error) {
	want := (reservations + e.perOwner - 1) / e.perOwner
	e.ownersMu.Lock()
	defer e.ownersMu.Unlock()
	if n := want - len(e.owners); n > 0 {
		begin := time.Now()
		more, err := e.createPods(ctx, "owner", []string{fillerNode}, n, nil)
		if err != nil {
			return nil, err
		}
		e.owners = append(e.owners, more...)
		if n >= 1000 {
			e.logf("created %d owner pods in %v", n, time.Since(begin).Round(time.Millisecond))
		}
	}
	return e.owners[:want], nil
}

// directReservation is a reservation as the agent would have made it for
// owner's interface ifName, created by the bench straight through the
// API. The controller's DuplicateAttachment rule takes two reservations of
// one (sandbox, interface, range) for a lost DEL and releases all but one:
// reservations of one range that share an owner must differ in ifName.
func directReservation(network, rng string, addr netip.Addr, owner benchPod, ifName string) *tenurev1alpha1.IPReservation {
	return reservation.New(reservation.Spec{
		Network: network, Kind: tenurev1alpha1.KindAddress, Item: netip.PrefixFrom(addr, addr.BitLen()), Range: rng, CNINetwork: network,
		Owner: tenurev1alpha1.ReservationOwner{
			Kind: tenurev1alpha1.OwnerPod, Namespace: owner.ns, Name: owner.name, UID: owner.uid,
			PodName: owner.name, PodUID: owner.uid, ContainerID: owner.containerID, Interface: ifName, Node: owner.node,
		},
	})
}

// netconf is a network configuration as the runtime passes it to the main
// plugin and the main plugin to its IPAM plugin.
func netconf(name, socket, ipam string) []byte {
	ipam = strings.TrimSpace(ipam)
	ipam = strings.TrimSuffix(strings.TrimPrefix(ipam, "{"), "}")
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth0","ipam":{"type":"tenure","agent_socket":%q,%s}}`,
		name, socket, ipam))
}
