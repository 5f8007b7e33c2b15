// Package demo is `make demo`: tenure's main job on a local control plane,
// narrated. It starts kube-apiserver and etcd, installs the CRDs, the RBAC
// and the agents' admission policy that ship in deploy/, runs the controller
// and three agents as local processes with their own service-account tokens
// (each agent's bound to a pod on its node, which the policy holds it to),
// and then shows a /29
// storage SAN filling up across three nodes, a node lost hard and its
// addresses given back, and a VM live-migrating with its IPv4, IPv6 and
// delegated /56 intact. As root it also plumbs real network namespaces with
// the reference bridge plugin.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// Options configure a demo run.
type Options struct {
	Out io.Writer
	// Bins are tenure's binaries; the controller is needed for the node-loss act.
	Bins testbed.Binaries
	// PluginDir holds the reference CNI plugins (bridge) for the namespace act.
	PluginDir string
	// Dir keeps logs and kubeconfigs; a temp dir when empty.
	Dir string
}

// Report is what the demo showed, for the test that checks its claims.
type Report struct {
	SAN               []Allocation
	ExhaustionError   string
	LostNode          string
	LostAddresses     []string
	ReleasedAfter     time.Duration
	RetriedAddress    string
	MigrationSource   []string // IPv4, IPv6 and the delegated prefix
	MigrationTarget   []string
	ClaimAfterSrcDel  []string
	BridgeSkipped     string
	BridgeAddress     string
	BridgeIfAddresses string
	// PolicyRefusals are the lines of the agents' logs that report a write
	// the node-restriction policy refused: none, when the agents did only
	// their own nodes' work.
	PolicyRefusals []string
}

// Allocation is one pod's answer on the SAN.
type Allocation struct{ Pod, Node, Address string }

const (
	sanNetwork = "storage-san"
	sanRange   = "192.168.100.0/29"
	vmNetwork  = "vm-net"
	namespace  = "demo"
)

var nodes = []string{"node-a", "node-b", "node-c"}

type run struct {
	opts   Options
	out    io.Writer
	cp     *controlplane.ControlPlane
	c      client.WithWatch
	dir    string
	agents map[string]*testbed.Agent
	// agentLogs outlive r.agents, which drops a lost node's agent.
	agentLogs []string
	ctrl      *testbed.Process
	rep       *Report
}

// Run plays the demo and stops everything it started.
func Run(ctx context.Context, opts Options) (*Report, error) {
	r := &run{opts: opts, out: opts.Out, agents: map[string]*testbed.Agent{}, rep: &Report{}}
	if r.out == nil {
		r.out = io.Discard
	}
	r.dir = opts.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "tenure-demo-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		r.dir = d
	}
	defer r.stop()
	for _, act := range []func(context.Context) error{r.controlPlane, r.components, r.san, r.nodeLoss, r.migration, r.namespaces, r.show} {
		if err := act(ctx); err != nil {
			return r.rep, err
		}
	}
	for _, log := range r.agentLogs {
		r.rep.PolicyRefusals = append(r.rep.PolicyRefusals, testbed.PolicyRefusals(log)...)
	}
	return r.rep, nil
}

func (r *run) say(format string, args ...any) { fmt.Fprintf(r.out, format+"\n", args...) }

func (r *run) stop() {
	for _, a := range r.agents {
		a.Stop()
	}
	if r.ctrl != nil {
		r.ctrl.Stop()
	}
	if r.cp != nil {
		_ = r.cp.Stop()
		r.say("\nStopped the agents, the controller, kube-apiserver and etcd.")
	}
}

func (r *run) controlPlane(ctx context.Context) error {
	r.say("tenure demo: cluster-wide IPAM on a local control plane\n")
	begin := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(r.dir, "control-plane")})
	if err != nil {
		return err
	}
	r.cp = cp
	r.say("[1/6] kube-apiserver and etcd running on %s (ready in %.1fs)", cp.URL, time.Since(begin).Seconds())
	if r.c, err = kube.NewClient(cp.Config); err != nil {
		return err
	}
	crds, _ := fs.Sub(deploy.CRDs, "crds")
	if err := controlplane.InstallCRDs(ctx, cp.Config, crds); err != nil {
		return err
	}
	n, err := testbed.InstallAgentAccess(ctx, cp.Config)
	if err != nil {
		return err
	}
	r.say("      installed the CRDs of deploy/crds and the %d RBAC and admission-policy objects of deploy/rbac and deploy/policy", n)
	return nil
}

func (r *run) components(ctx context.Context) error {
	for _, n := range nodes {
		a, err := testbed.StartNodeAgent(ctx, r.opts.Bins, r.dir, r.cp.Config, n)
		if err != nil {
			return err
		}
		r.agents[n] = a
		r.agentLogs = append(r.agentLogs, a.Log)
	}
	started := "agents for " + strings.Join(nodes, ", ")
	if r.opts.Bins.Controller != "" {
		ctrlKC := filepath.Join(r.dir, "controller.kubeconfig")
		if err := testbed.ServiceAccountKubeconfig(ctx, r.cp.Config, testbed.AgentNamespace, "tenure-controller", ctrlKC); err != nil {
			return err
		}
		p, err := testbed.StartProcess("controller", r.opts.Bins.Controller, filepath.Join(r.dir, "controller.log"),
			"--kubeconfig", ctrlKC, "--leader-election-namespace", "tenure-system",
			"--sweep-interval", "2s", "--metrics-addr", "0", "--health-addr", "0")
		if err != nil {
			return err
		}
		r.ctrl = p
		started += " and the controller"
	}
	r.say("[2/6] started %s as local processes, each with its own service-account token;", started)
	r.say("      each agent's token is bound to an agent pod on its node, so it may only touch that node's reservations")
	return testbed.EnsureNamespace(ctx, r.c, namespace)
}

func (r *run) netconf(node, name, ipam string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"macvlan","master":"eth1.100","ipam":%s}`,
		name, strings.Replace(ipam, "{", fmt.Sprintf(`{"type":"tenure","agent_socket":%q,`, r.agents[node].Socket), 1)))
}

type demoPod struct{ name, node, uid, containerID string }

func (r *run) pod(ctx context.Context, name, node string, annotations map[string]string) (demoPod, error) {
	p, err := testbed.CreatePod(ctx, r.c, namespace, name, node, annotations)
	if err != nil {
		return demoPod{}, err
	}
	return demoPod{name: name, node: node, uid: string(p.UID), containerID: "sandbox-" + string(p.UID)}, nil
}

func (r *run) cni(ctx context.Context, cmd string, p demoPod, conf []byte) (*current.Result, error) {
	out, err := testbed.ExecShim(ctx, r.opts.Bins.Shim, testbed.CNICall{
		Command: cmd, ContainerID: p.containerID, IfName: "net1", Args: testbed.PodArgs(namespace, p.name, p.uid), Config: conf,
	})
	if err != nil || cmd != "ADD" {
		return nil, err
	}
	res := &current.Result{}
	return res, json.Unmarshal(out, res)
}

func (r *run) san(ctx context.Context) error {
	ipam := fmt.Sprintf(`{"range":%q,"network_name":%q}`, sanRange, sanNetwork)
	r.say("\n[3/6] A storage SAN on a VLAN: %s, no gateway, no DHCP on the wire (6 usable addresses).", sanRange)
	r.say("      Pods on three nodes ask for an address until the range is full:\n")
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "      POD\tNODE\tADDRESS")
	for i := 1; i <= 7; i++ {
		node := nodes[(i-1)%3]
		p, err := r.pod(ctx, fmt.Sprintf("san-%d", i), node, nil)
		if err != nil {
			return err
		}
		res, err := r.cni(ctx, "ADD", p, r.netconf(node, sanNetwork, ipam))
		var cniErr *types.Error
		if errors.As(err, &cniErr) {
			fmt.Fprintf(tw, "      %s\t%s\tERROR (CNI %d): %s\n", p.name, node, cniErr.Code, cniErr.Msg)
			r.rep.ExhaustionError = cniErr.Msg
			continue
		}
		if err != nil {
			return err
		}
		addr := res.IPs[0].Address.String()
		fmt.Fprintf(tw, "      %s\t%s\t%s\n", p.name, node, addr)
		r.rep.SAN = append(r.rep.SAN, Allocation{Pod: p.name, Node: node, Address: addr})
	}
	return tw.Flush()
}

func (r *run) nodeLoss(ctx context.Context) error {
	lost := "node-c"
	r.rep.LostNode = lost
	if r.ctrl == nil {
		r.say("\n[4/6] skipped: tenure-controller is not built")
		return nil
	}
	var victims []Allocation
	for _, a := range r.rep.SAN {
		if a.Node == lost {
			victims = append(victims, a)
			r.rep.LostAddresses = append(r.rep.LostAddresses, strings.Split(a.Address, "/")[0])
		}
	}
	r.say("\n[4/6] %s is lost hard: its agent is killed, the node goes NotReady and its pods are", lost)
	r.say("      force-deleted, as the node lifecycle controller does. No CNI DEL ever runs.")
	r.agents[lost].Kill()
	delete(r.agents, lost)
	if err := testbed.SetNodeReady(ctx, r.c, lost, false); err != nil {
		return err
	}
	begin := time.Now()
	for _, v := range victims {
		if err := testbed.ForceDeletePod(ctx, r.c, namespace, v.Pod); err != nil {
			return err
		}
	}
	left := 0
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		list := &tenurev1alpha1.IPReservationList{}
		if err := r.c.List(ctx, list, client.MatchingLabels{reservation.LabelNode: reservation.NodeLabel(lost)}); err != nil {
			return false, err
		}
		left = len(list.Items)
		return left == 0, nil
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case wait.Interrupted(err):
		return fmt.Errorf("the controller did not release %d reservations of %s within 60s (log: %s)", left, lost, r.ctrl.Log)
	case err != nil:
		return err
	}
	r.rep.ReleasedAfter = time.Since(begin)
	r.say("      the controller released %s %.1fs after the pods were deleted",
		strings.Join(r.rep.LostAddresses, " and "), r.rep.ReleasedAfter.Seconds())
	p, err := r.pod(ctx, "san-7-retry", "node-a", nil)
	if err != nil {
		return err
	}
	res, err := r.cni(ctx, "ADD", p, r.netconf("node-a", sanNetwork, fmt.Sprintf(`{"range":%q,"network_name":%q}`, sanRange, sanNetwork)))
	if err != nil {
		return fmt.Errorf("retry after node loss: %w", err)
	}
	r.rep.RetriedAddress = res.IPs[0].Address.String()
	r.say("      the pod that found the SAN full retries on node-a and gets %s", r.rep.RetriedAddress)
	return nil
}

func (r *run) migration(ctx context.Context) error {
	ipam := `{"ipRanges":[{"range":"10.200.0.0/24"},{"range":"fd00:200::/64"}],
		"prefix_delegation":{"range":"2001:db8:100::/40","prefix_length":56},"network_name":"vm-net"}`
	r.say("\n[5/6] A KubeVirt VM with IPAMClaim vm1.vm-net live-migrates from node-a to node-b.")
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "vm1.vm-net"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: vmNetwork, Interface: "net1"}}
	if err := r.c.Create(ctx, claim); err != nil {
		return err
	}
	ann := map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"vm-net","interface":"net1","ipam-claim-reference":"vm1.vm-net"}]`}
	src, err := r.pod(ctx, "virt-launcher-vm1-a", "node-a", ann)
	if err != nil {
		return err
	}
	resSrc, err := r.cni(ctx, "ADD", src, r.netconf("node-a", vmNetwork, ipam))
	if err != nil {
		return err
	}
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		return err
	}
	r.rep.MigrationSource = append(ips(resSrc), claim.Status.DelegatedPrefixes...)
	dst, err := r.pod(ctx, "virt-launcher-vm1-b", "node-b", ann)
	if err != nil {
		return err
	}
	resDst, err := r.cni(ctx, "ADD", dst, r.netconf("node-b", vmNetwork, ipam))
	if err != nil {
		return err
	}
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		return err
	}
	r.rep.MigrationTarget = append(ips(resDst), claim.Status.DelegatedPrefixes...)
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n      \tSOURCE %s (node-a)\tTARGET %s (node-b, source still running)\t\n", src.name, dst.name)
	labels := []string{"IPv4", "IPv6", "delegated /56"}
	for i := range labels {
		same := "different!"
		if i < len(r.rep.MigrationSource) && i < len(r.rep.MigrationTarget) && r.rep.MigrationSource[i] == r.rep.MigrationTarget[i] {
			same = "same"
		}
		fmt.Fprintf(tw, "      %s\t%s\t%s\t%s\n", labels[i], at(r.rep.MigrationSource, i), at(r.rep.MigrationTarget, i), same)
	}
	_ = tw.Flush()
	if _, err := r.cni(ctx, "DEL", src, r.netconf("node-a", vmNetwork, ipam)); err != nil {
		return err
	}
	if err := testbed.ForceDeletePod(ctx, r.c, namespace, src.name); err != nil {
		return err
	}
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		return err
	}
	r.rep.ClaimAfterSrcDel = append(slices.Clone(claim.Status.IPs), claim.Status.DelegatedPrefixes...)
	owner := ""
	if claim.Status.OwnerPod != nil {
		owner = claim.Status.OwnerPod.Name
	}
	r.say("\n      the source pod's DEL released nothing: the claim still holds ips %v, delegatedPrefixes %v, ownerPod %s",
		claim.Status.IPs, claim.Status.DelegatedPrefixes, owner)
	return nil
}

func ips(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "-"
}

func (r *run) namespaces(ctx context.Context) error {
	if ok, why := testbed.CanPlumb(); !ok || r.opts.PluginDir == "" {
		if why == "" {
			why = "the reference CNI plugins are not built"
		}
		r.rep.BridgeSkipped = why
		r.say("\n[6/6] skipped the network-namespace part: %s", why)
		return nil
	}
	addr, shown, err := bridgeAct(ctx, r)
	if err != nil {
		return err
	}
	r.rep.BridgeAddress, r.rep.BridgeIfAddresses = addr, shown
	r.say("\n[6/6] Real network namespaces: the reference bridge plugin with tenure as its IPAM")
	r.say("      put %s on eth0 of a pod namespace:\n      %s", addr, shown)
	return nil
}

func (r *run) show(ctx context.Context) error {
	r.say("\nkubectl get ipreservations:\n")
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", r.cp.KubeconfigPath, "get", "ipreservations", "-o", "wide")
		out, err := cmd.CombinedOutput()
		lines := []string{}
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if strings.Contains(l, "version difference") || strings.HasPrefix(l, "WARNING") {
				continue // Debian's kubectl warns about skew with a newer server
			}
			lines = append(lines, l)
		}
		fmt.Fprintln(r.out, indent(strings.Join(lines, "\n")))
		if err == nil {
			return nil
		}
	}
	// Without kubectl, the same columns from the API.
	list := &tenurev1alpha1.IPReservationList{}
	if err := r.c.List(ctx, list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(r.out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "      NAME\tADDRESS\tNETWORK\tOWNER\tNODE")
	for _, it := range list.Items {
		fmt.Fprintf(tw, "      %s\t%s\t%s\t%s\t%s\n", it.Name, it.Spec.Address, it.Spec.Network, it.Spec.Owner.Name, it.Spec.Owner.Node)
	}
	return tw.Flush()
}

func indent(s string) string { return "      " + strings.ReplaceAll(s, "\n", "\n      ") }
