// Package nodetest is what the real-node suites (test/node, test/nodes)
// share: the waits and reads they make of pods, networks and reservations
// through a cluster client, a node's network namespaces read with netlink,
// and their set-up's undo stack.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/dev/localnode"
	"github.com/tenure-ipam/tenure/internal/controller"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// Kube reads and waits on a cluster for a test.
type Kube struct {
	Client    client.WithWatch
	Clientset kubernetes.Interface
	// Diagnose, when set, is added to a failed wait's message (a log tail).
	Diagnose func() string
}

// Context is a context for t that ends after d or with the test.
func Context(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Poll calls check every 250 ms until it returns nil; it fails the test
// with check's last answer when ctx ends.
func (k *Kube) Poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		var more string
		if k.Diagnose != nil {
			more = "\n" + k.Diagnose()
		}
		t.Fatalf("waiting for %s: %v (last: %v)%s", what, err, last, more)
	}
}

// Namespace makes a namespace for the test and deletes it afterwards.
func (k *Kube) Namespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Client.Delete(context.Background(), ns) })
	return name
}

// NAD creates a NetworkAttachmentDefinition whose config is conf.
func (k *Kube) NAD(ctx context.Context, t *testing.T, ns, name, conf string) {
	t.Helper()
	obj, err := localnode.NAD(ns, name, conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// Pod reads a pod.
func (k *Kube) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
	return &p, err
}

// WaitRunning waits for the pod to run with a pod IP, and returns it.
func (k *Kube) WaitRunning(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	k.Poll(ctx, t, "pod "+ns+"/"+name+" to run", func() error {
		p, err := k.Pod(ctx, ns, name)
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, events: %s", p.Status.Phase, k.Events(ctx, ns, name))
		}
		pod = p
		return nil
	})
	return pod
}

// WaitGone waits for the pod to be deleted.
func (k *Kube) WaitGone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	k.Poll(ctx, t, "pod "+ns+"/"+name+" to be gone", func() error {
		_, err := k.Pod(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// Events joins the reasons and messages of the events about an object.
func (k *Kube) Events(ctx context.Context, ns, name string) string {
	list, err := k.Clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range list.Items {
		msgs = append(msgs, e.Reason+": "+e.Message)
	}
	return strings.Join(msgs, " | ")
}

// Reservations lists the reservations owned by pods or claims in
// namespace ns, by address.
func (k *Kube) Reservations(ctx context.Context, t *testing.T, ns string) []tenurev1alpha1.IPReservation {
	t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := k.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var out []tenurev1alpha1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Owner.Namespace == ns {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b tenurev1alpha1.IPReservation) int { return strings.Compare(a.Spec.Address, b.Spec.Address) })
	return out
}

// WaitReleased waits until no reservation of namespace ns remains.
func (k *Kube) WaitReleased(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	k.Poll(ctx, t, "every reservation of namespace "+ns+" to be released", func() error {
		if left := k.Reservations(ctx, t, ns); len(left) > 0 {
			return fmt.Errorf("%d left, e.g. %s of %s", len(left), left[0].Spec.Address, left[0].Spec.Owner.Name)
		}
		return nil
	})
}

// Claim reads an IPAMClaim.
func (k *Kube) Claim(ctx context.Context, t *testing.T, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// FullRange waits until every pod of names but one runs and that one
// waits with tenure's "is full" Event, and returns the running pods and
// the waiting pod's name.
func (k *Kube) FullRange(ctx context.Context, t *testing.T, ns string, names []string) (running []*corev1.Pod, waiting string) {
	t.Helper()
	k.Poll(ctx, t, fmt.Sprintf("%d pods running and one refused for a full range", len(names)-1), func() error {
		running, waiting = nil, ""
		for _, n := range names {
			p, err := k.Pod(ctx, ns, n)
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p)
			} else if strings.Contains(k.Events(ctx, ns, n), "is full") {
				waiting = n
			}
		}
		if len(running) != len(names)-1 || waiting == "" {
			return fmt.Errorf("%d running, waiting pod with the exhaustion event: %q", len(running), waiting)
		}
		return nil
	})
	t.Logf("%s waits: %s", waiting, k.Events(ctx, ns, waiting))
	return running, waiting
}

// SetAgentImage points every container of the agent DaemonSet at image.
func (k *Kube) SetAgentImage(ctx context.Context, t *testing.T, image string) {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: localnode.Namespace, Name: localnode.AgentDaemonSet}, &ds); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ds.DeepCopy())
	for _, cs := range [][]corev1.Container{ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers} {
		for i := range cs {
			cs[i].Image = image
		}
	}
	if err := k.Client.Patch(ctx, &ds, patch); err != nil {
		t.Fatal(err)
	}
}

// ProjectedToken reads the service-account token the kubelet whose root
// directory is kubeletRoot projected into the pod with uid podUID.
func ProjectedToken(t *testing.T, kubeletRoot, podUID string) (token, file string) {
	t.Helper()
	glob := filepath.Join(kubeletRoot, "pods", podUID, "volumes", "kubernetes.io~projected", "kube-api-access-*", "token")
	files, err := filepath.Glob(glob)
	if err != nil || len(files) != 1 {
		t.Fatalf("the pod's projected token %s: %v %v", glob, files, err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw)), files[0]
}

// Undo is a set-up's undo stack: each step that made something pushes what
// removes it, and Run removes it all, last first.
type Undo []func() error

// Push adds f to be run first.
func (u *Undo) Push(f func() error) { *u = append(*u, f) }

// Run runs every step, last first, and joins their errors.
func (u *Undo) Run() error {
	var errs []error
	for i := len(*u) - 1; i >= 0; i-- {
		errs = append(errs, (*u)[i]())
	}
	*u = nil
	return errors.Join(errs...)
}

// BinDir is TENURE_BIN_DIR, or the repository's bin/ seen from a test
// package of the developer module (dev/test/NAME), made absolute.
func BinDir() (string, error) {
	dir := os.Getenv("TENURE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "bin")
	}
	return filepath.Abs(dir)
}

// Connect makes k's clients for cfg.
func (k *Kube) Connect(cfg *rest.Config) error {
	c, err := kube.NewClient(cfg)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k.Client, k.Clientset = c, cs
	return nil
}

// Checked is an undo step: stop, then an error naming what leftovers
// finds still on the host.
func Checked(what string, stop func() error, leftovers func() ([]string, error)) func() error {
	return func() error {
		if err := stop(); err != nil {
			return err
		}
		left, err := leftovers()
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("the %s left behind: %s", what, strings.Join(left, "; "))
		}
		return err
	}
}

// WaitNotReady waits until the node's Ready condition is no longer True.
func (k *Kube) WaitNotReady(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	k.Poll(ctx, t, "node "+node+" to be marked not Ready", func() error {
		var n corev1.Node
		if err := k.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("still Ready")
	})
}

// Fence taints the node node.kubernetes.io/out-of-service=nodeshutdown
// with effect, as an operator or a fencing agent marks a node that is shut
// down (Kubernetes' non-graceful node shutdown): the tenure controller
// then releases the addresses of its terminating pods.
func (k *Kube) Fence(ctx context.Context, t *testing.T, node string, effect corev1.TaintEffect) {
	t.Helper()
	k.setTaints(ctx, t, node, func(ts []corev1.Taint) []corev1.Taint {
		return append(ts, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: effect})
	})
}

// Unfence removes the out-of-service taint, as the operator does once the
// node is back.
func (k *Kube) Unfence(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	k.setTaints(ctx, t, node, func(ts []corev1.Taint) []corev1.Taint {
		return slices.DeleteFunc(ts, func(x corev1.Taint) bool { return x.Key == corev1.TaintNodeOutOfService })
	})
}

func (k *Kube) setTaints(ctx context.Context, t *testing.T, node string, change func([]corev1.Taint) []corev1.Taint) {
	t.Helper()
	// The node lifecycle controller writes the node's taints too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		n.Spec.Taints = change(n.Spec.Taints)
		return k.Client.Update(ctx, &n)
	})
	if err != nil {
		t.Fatalf("tainting node %s: %v", node, err)
	}
}

// WaitFenceWait waits until the tenure controller has told, with its
// WaitingForFence Event on the pod, that the pod's addresses wait for its
// node to be fenced.
func (k *Kube) WaitFenceWait(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	k.Poll(ctx, t, "the tenure controller to tell that pod "+ns+"/"+name+"'s addresses wait for its node to be fenced", func() error {
		var evs corev1.EventList
		if err := k.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.EventReasonFenceWait && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name &&
				strings.Contains(e.Message, corev1.TaintNodeOutOfService) {
				return nil
			}
		}
		return fmt.Errorf("no %s Event", controller.EventReasonFenceWait)
	})
}
