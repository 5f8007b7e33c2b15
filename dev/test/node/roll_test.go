//go:build integration

package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/dev/nodetest"
)

// The agent DaemonSet is rolled to a second image while
// pods are being created. The shim answers "try again" while no agent
// serves the socket, the kubelet retries, and every pod gets an address:
// none twice, none leaked once the pods are gone.
func TestRollingTheAgentWhilePodsStart(t *testing.T) {
	ctx := nodetest.Context(t, 6*time.Minute)
	ns := kc.Namespace(ctx, t, "roll")
	hostLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "tnroll0"}})
	kc.NAD(ctx, t, ns, "roll-net", `{"cniVersion": "1.0.0", "name": "roll-net", "type": "bridge", "bridge": "tnroll0",
		"ipam": {"type": "tenure", "range": "10.210.0.0/24"}}`)

	var ds appsv1.DaemonSet
	if err := cl.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &ds); err != nil {
		t.Fatal(err)
	}
	oldImage := ds.Spec.Template.Spec.Containers[0].Image
	// The same binaries under a second name, as a release pushed anew:
	// a different image to the kubelet, which replaces the pod.
	newImage := strings.SplitN(oldImage, ":", 2)[0] + ":rolled"
	if err := node.TagImage(ctx, oldImage, newImage); err != nil {
		t.Fatal(err)
	}
	oldAgent := podOf(t, "app.kubernetes.io/name=tenure-agent")

	// Pods keep coming while the agent is replaced.
	const pods = 12
	var wg sync.WaitGroup
	wg.Add(1)
	createErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		for i := range pods {
			if err := cl.Create(ctx, podSpecOn(ns, fmt.Sprintf("roll-%d", i), "roll-net")); err != nil {
				createErr <- err
				return
			}
			time.Sleep(250 * time.Millisecond) // a stream of pods, not a burst
		}
	}()
	kc.SetAgentImage(ctx, t, newImage)
	wg.Wait()
	select {
	case err := <-createErr:
		t.Fatal(err)
	default:
	}
	if err := localnode.WaitRollout(ctx, cl); err != nil {
		t.Fatal(err)
	}
	newAgent := podOf(t, "app.kubernetes.io/name=tenure-agent")
	if newAgent.UID == oldAgent.UID || newAgent.Spec.Containers[0].Image != newImage {
		t.Fatalf("the agent was not replaced: pod %s image %s", newAgent.Name, newAgent.Spec.Containers[0].Image)
	}
	// Put the shipped image back for the tests after this one.
	t.Cleanup(func() {
		ctx := context.Background()
		kc.SetAgentImage(ctx, t, oldImage)
		if err := localnode.WaitRollout(ctx, cl); err != nil {
			t.Error(err)
		}
	})

	seen := map[string]string{}
	retried := 0
	for i := range pods {
		name := fmt.Sprintf("roll-%d", i)
		p := kc.WaitRunning(ctx, t, ns, name)
		addrs := interfaceAddrs(t, p, "net1")
		if len(addrs) != 1 {
			t.Fatalf("pod %s: net1 holds %v", name, addrs)
		}
		if other, dup := seen[addrs[0]]; dup {
			t.Errorf("%s and %s both hold %s", name, other, addrs[0])
		}
		seen[addrs[0]] = name
		if strings.Contains(kc.Events(ctx, ns, name), "FailedCreatePodSandBox") {
			retried++
		}
	}
	t.Logf("%d of %d pods were retried by the kubelet while the agent was away", retried, pods)
	if n := len(kc.Reservations(ctx, t, ns)); n != pods {
		t.Errorf("%d reservations for %d pods", n, pods)
	}
	for i := range pods {
		deletePod(ctx, t, ns, fmt.Sprintf("roll-%d", i))
	}
	kc.WaitReleased(ctx, t, ns)
}
