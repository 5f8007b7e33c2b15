package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/tenure-ipam/tenure/test/testbed"
)

// bridgeAct plumbs a pod namespace with the reference bridge plugin calling
// tenure, inside a "host" namespace of ours so the machine's own network is
// never touched.
func bridgeAct(ctx context.Context, r *run) (addr, shown string, err error) {
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e6)
	hostNs, podNs := "tn-demo-host-"+suffix, "tn-demo-pod-"+suffix
	_, rmHost, err := testbed.AddNetns(hostNs)
	if err != nil {
		return "", "", err
	}
	defer rmHost()
	podPath, rmPod, err := testbed.AddNetns(podNs)
	if err != nil {
		return "", "", err
	}
	defer rmPod()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"demo-bridge","plugins":[{"type":"bridge","bridge":"tenurebr0",
		"ipam":{"type":"tenure","agent_socket":%q,"range":"10.201.0.0/24","gateway":"10.201.0.1","network_name":"demo-bridge"}}]}`,
		r.agents["node-a"].Socket)
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		return "", "", err
	}
	p, err := r.pod(ctx, "bridged", "node-a", nil)
	if err != nil {
		return "", "", err
	}
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: podPath, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", namespace}, {"K8S_POD_NAME", p.name}, {"K8S_POD_UID", p.uid}}}
	cni := libcni.NewCNIConfigWithCacheDir([]string{r.opts.PluginDir, r.opts.Bins.Dir}, r.dir+"/cni-cache", nil)
	err = testbed.InNetns(hostNs, func() error {
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		cur, err := current.NewResultFromResult(res)
		if err != nil {
			return err
		}
		addr = cur.IPs[0].Address.String()
		return nil
	})
	if err != nil {
		return "", "", err
	}
	shown, err = testbed.IPIn(podNs, "-o", "-4", "addr", "show", "dev", "eth0")
	if err != nil {
		return "", "", err
	}
	if f := strings.Fields(shown); len(f) >= 4 {
		shown = strings.Join(f[1:4], " ")
	}
	if err := testbed.InNetns(hostNs, func() error { return cni.DelNetworkList(ctx, list, rt) }); err != nil {
		return "", "", err
	}
	return addr, shown, nil
}
