package testbed

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureNamespace creates a namespace if missing.
func EnsureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// CreateNode creates a Ready node object, as a kubelet registering would.
func CreateNode(ctx context.Context, c client.Client, name string) (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return n, SetNodeReady(ctx, c, name, true)
}

// SetNodeReady sets the node's Ready condition, as the kubelet or the node
// lifecycle controller would.
func SetNodeReady(ctx context.Context, c client.Client, name string, ready bool) error {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "Test"}}
	return c.Status().Update(ctx, n)
}

// CreatePod creates a pod bound to node (spec.nodeName set, as after
// scheduling) with the given annotations.
func CreatePod(ctx context.Context, c client.Client, namespace, name, node string, annotations map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// ForceDeletePod deletes a pod with grace period 0, as `kubectl delete
// --force` or the pod GC after node loss does: no kubelet, no CNI DEL.
func ForceDeletePod(ctx context.Context, c client.Client, namespace, name string) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	err := c.Delete(ctx, p, client.GracePeriodSeconds(0))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
