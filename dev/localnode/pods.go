package localnode

import (
	"encoding/json"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/tenure-ipam/tenure/dev/devnode"
)

// Pod is a pod of the node's pinned pause image (nothing to pull), attached
// through Multus to the networks of the network-selection annotation nets.
// It tolerates a lost node for one second only, so that a lost node's pods
// are evicted at once, and ends within a second.
func Pod(namespace, name, nets string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: nets},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "pause", Image: devnode.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(1))},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(1))},
			},
		},
	}
}

// NAD is a NetworkAttachmentDefinition with the CNI configuration conf, as
// an unstructured object (the client's scheme does not know Multus' types).
func NAD(namespace, name, conf string) (*unstructured.Unstructured, error) {
	var probe map[string]any
	if err := json.Unmarshal([]byte(conf), &probe); err != nil {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: config: %w", name, err)
	}
	n := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: conf},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion(nadv1.SchemeGroupVersion.String())
	obj.SetKind("NetworkAttachmentDefinition")
	return obj, nil
}

// AttachmentIPs is what Multus recorded for interface ifname in the pod's
// network-status annotation.
func AttachmentIPs(p *corev1.Pod, ifname string) ([]string, error) {
	raw, ok := p.Annotations[nadv1.NetworkStatusAnnot]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has no %s annotation", p.Namespace, p.Name, nadv1.NetworkStatusAnnot)
	}
	var statuses []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %s: %w", p.Namespace, p.Name, nadv1.NetworkStatusAnnot, err)
	}
	for _, s := range statuses {
		if s.Interface == ifname {
			return s.IPs, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: no %s in %s", p.Namespace, p.Name, ifname, nadv1.NetworkStatusAnnot)
}
