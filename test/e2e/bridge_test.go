//go:build integration

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// referencePlugins builds (or finds cached) bridge/macvlan/loopback from
// github.com/containernetworking/plugins.
func referencePlugins(t *testing.T) string {
	t.Helper()
	return cachedTool(t, "build-cni-plugins.sh")
}

func TestBridgePluginConfiguresTheAddressTenureReturns(t *testing.T) {
	if ok, why := testbed.CanPlumb(); !ok {
		t.Fatal(why)
	}
	ctx := testContext(t, 2*time.Minute)
	c := apiClient(t)
	agents := startAgents(t, ctx, "nbr")
	pluginDir := referencePlugins(t)

	suffix := fmt.Sprint(time.Now().UnixNano() % 1e6)
	hostNs, podNs := "tn-host-"+suffix, "tn-pod-"+suffix
	_, rmHost, err := testbed.AddNetns(hostNs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rmHost)
	podPath, rmPod, err := testbed.AddNetns(podNs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rmPod)

	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"brnet","plugins":[{"type":"bridge","bridge":"tnbr0",
		"ipam":{"type":"tenure","agent_socket":%q,"range":"10.70.0.0/29","gateway":"10.70.0.1","network_name":"brnet"}}]}`,
		agents["nbr"].Socket)
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	p := newPod(t, ctx, c, "e2e-br", "nbr", nil)
	rt := &libcni.RuntimeConf{
		ContainerID: p.containerID, NetNS: podPath, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", p.name}, {"K8S_POD_UID", p.uid}},
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{pluginDir, bins.Dir}, t.TempDir(), nil)

	var res *current.Result
	// The bridge lives in a namespace of ours, not on the machine itself.
	err = testbed.InNetns(hostNs, func() error {
		r, err := cni.AddNetworkList(context.Background(), list, rt)
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	})
	if err != nil {
		t.Fatalf("bridge ADD with tenure IPAM: %v", err)
	}
	if len(res.IPs) != 1 {
		t.Fatalf("result has %d IPs", len(res.IPs))
	}
	want := res.IPs[0].Address.String()
	if res.IPs[0].Gateway.String() != "10.70.0.1" {
		t.Errorf("gateway %v, want 10.70.0.1", res.IPs[0].Gateway)
	}
	shown, err := testbed.IPIn(podNs, "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(shown, err)
	}
	if !strings.Contains(shown, "inet "+want) {
		t.Fatalf("eth0 in the pod namespace shows %q, want %s", shown, want)
	}
	if got := reservationsOf(t, ctx, "brnet"); len(got) != 1 || got[0].Spec.Address != res.IPs[0].Address.IP.String() {
		t.Fatalf("reservations %+v, want one for %s", got, want)
	}

	if err := testbed.InNetns(hostNs, func() error { return cni.DelNetworkList(context.Background(), list, rt) }); err != nil {
		t.Fatalf("bridge DEL: %v", err)
	}
	if shown, _ := testbed.IPIn(podNs, "-o", "addr", "show"); strings.Contains(shown, want) {
		t.Fatalf("after DEL the pod namespace still shows %s: %s", want, shown)
	}
	if got := reservationsOf(t, ctx, "brnet"); len(got) != 0 {
		t.Fatalf("%d reservations after DEL", len(got))
	}
}
