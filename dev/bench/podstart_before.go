package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/dev/devnode"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The older build of a pod-start run with PodStartOptions.BaselineBin: its
// agent runs as a DaemonSet of its own beside deploy/'s, as the same
// service account (so the same policies and webhook judge its writes), on
// a socket of its own in the agent's /run/tenure; its shim is installed in
// each node's CNI directory under beforeShimType, and the ipamBefore
// network's `agent_socket` points it at that socket. Nothing else of the
// node changes: both agents serve their own networks.
const (
	beforeDaemonSet = "tenure-agent-before"
	beforeShimType  = "tenure-before"
	beforeSocket    = "/run/tenure/before.sock"
	beforeBinMount  = "/tenure-before"
)

// podStartBeforeAgent installs dir's shim as beforeShimType on each node
// and rolls out beforeDaemonSet, the running tenure-agent DaemonSet's pod
// with dir's agent; undo removes both.
func podStartBeforeAgent(ctx context.Context, c client.Client, nodes []*devnode.Node, dir string) (undo func(), err error) {
	var made []string
	var ds *appsv1.DaemonSet
	undo = func() {
		if ds != nil {
			podStartRemoveBefore(context.WithoutCancel(ctx), c, ds)
		}
		for _, p := range made {
			_ = os.Remove(p)
		}
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return undo, err
	}
	bins, err := baselineBinaries(dir, testbed.Binaries{})
	if err != nil {
		return undo, err
	}
	for _, n := range nodes {
		p := filepath.Join(n.HostPath(devnode.HostCNIBinDir), beforeShimType)
		// A run killed before its cleanup leaves the link behind; the
		// name is the bench's own.
		_ = os.Remove(p)
		if err := os.Symlink(bins.Shim, p); err != nil {
			return undo, err
		}
		made = append(made, p)
	}
	var cur appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &cur); err != nil {
		return undo, fmt.Errorf("the agent DaemonSet it copies: %w", err)
	}
	ds, err = beforeDaemonSetFrom(&cur, dir)
	if err != nil {
		return undo, err
	}
	old := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name}}
	podStartRemoveBefore(ctx, c, old)
	if err := c.Create(ctx, ds); err != nil {
		return undo, err
	}
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var got appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKeyFromObject(ds), &got); err != nil {
			return false, nil
		}
		s := got.Status
		last = fmt.Sprintf("desired %d, ready %d", s.DesiredNumberScheduled, s.NumberReady)
		return s.DesiredNumberScheduled == int32(len(nodes)) && s.NumberReady == s.DesiredNumberScheduled, nil
	}); err != nil {
		return undo, fmt.Errorf("DaemonSet %s not ready on %d node(s) (%s): %w", ds.Name, len(nodes), last, err)
	}
	return undo, nil
}

// beforeDaemonSetFrom is cur (deploy/'s agent DaemonSet as rolled out) made
// the older build's: its own name and labels, no init container (the
// shim is installed by podStartBeforeAgent), the agent binary of dir
// mounted read-only from the host, its own socket, no metrics port (the
// host's is deploy/'s agent's) and a readiness check on its socket.
func beforeDaemonSetFrom(cur *appsv1.DaemonSet, dir string) (*appsv1.DaemonSet, error) {
	labels := map[string]string{"app.kubernetes.io/name": beforeDaemonSet, "app.kubernetes.io/component": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: cur.Namespace, Name: beforeDaemonSet, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: *cur.Spec.Template.DeepCopy(),
		},
	}
	t := &ds.Spec.Template
	t.Labels, t.Annotations = labels, nil
	t.Spec.InitContainers = nil
	var agent *corev1.Container
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == "agent" {
			agent = &t.Spec.Containers[i]
		}
	}
	if agent == nil {
		return nil, fmt.Errorf("DaemonSet %s/%s has no container named agent", cur.Namespace, cur.Name)
	}
	bin := beforeBinMount + "/tenure-agent"
	agent.Command = []string{bin}
	agent.Args = []string{"--node-name=$(NODE_NAME)", "--socket=" + beforeSocket}
	agent.Ports = nil
	agent.LivenessProbe = nil
	agent.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{bin, "health", "--socket=" + beforeSocket, "--ready"}}},
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 3,
	}
	agent.VolumeMounts = append(agent.VolumeMounts, corev1.VolumeMount{Name: "tenure-before", MountPath: beforeBinMount, ReadOnly: true})
	dirType := corev1.HostPathDirectory
	t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "tenure-before",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}})
	return ds, nil
}

// podStartRemoveBefore deletes ds and waits (up to a minute) until its
// pods are gone, so the node ends as it began.
func podStartRemoveBefore(ctx context.Context, c client.Client, ds *appsv1.DaemonSet) {
	err := c.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationForeground))
	if apierrors.IsNotFound(err) {
		return
	}
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
		return apierrors.IsNotFound(err), nil
	})
}
