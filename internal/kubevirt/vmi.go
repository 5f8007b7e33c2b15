// Package kubevirt reads where a KubeVirt virtual machine runs: the
// status.nodeName, status.activePods and status.migrationState of its VirtualMachineInstance
// (kubevirt.io/v1), and which VirtualMachineInstance a claim or a pod
// belongs to. tenure does not import KubeVirt's API module: it reads the
// few fields it needs from unstructured objects, so it neither follows
// KubeVirt's release cycle nor keeps whole VMI objects in memory.
package kubevirt

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group is KubeVirt's API group.
const Group = "kubevirt.io"

// VMIResource is the resource the agent watches; CRDName is the name of its
// CustomResourceDefinition.
var (
	VMIResource = schema.GroupVersionResource{Group: Group, Version: "v1", Resource: "virtualmachineinstances"}
	VMIKind     = schema.GroupVersionKind{Group: Group, Version: "v1", Kind: "VirtualMachineInstance"}
	VMIListKind = schema.GroupVersionKind{Group: Group, Version: "v1", Kind: "VirtualMachineInstanceList"}
)

// CRDName is the CustomResourceDefinition that serves VMIResource.
const CRDName = "virtualmachineinstances.kubevirt.io"

// VMI is what tenure reads of a VirtualMachineInstance.
type VMI struct {
	Namespace, Name string
	// NodeName is status.nodeName: the node the VM runs on ("" before it
	// was scheduled). KubeVirt moves it to the target node at the
	// migration's switchover, not when the migration starts.
	NodeName string
	// Migration is status.migrationState, nil when the VMI never migrated.
	Migration *Migration
	// ActivePods is status.activePods: pod UID to node name, every pod
	// the VMI controls (a migration's target included), written by
	// virt-controller from its pod cache when it syncs the VMI; the node
	// is "" for a pod not scheduled then.
	ActivePods map[string]string
}

// RunsPod reports whether KubeVirt names the pod (uid, name, on node) as
// one of the VMI's: a key of status.activePods (virt-controller lists
// there every pod the VMI controls), or the target pod of its migration
// on the migration's target node. A pod's UID is the API server's, so no
// other pod, a mirror pod included, can be taken for one of these.
func (v VMI) RunsPod(uid, name, node string) bool {
	if n, ok := v.ActivePods[uid]; ok && uid != "" && (n == "" || n == node) {
		return true
	}
	m := v.Migration
	return m != nil && name != "" && m.TargetPod == name && m.TargetNode != "" && m.TargetNode == node
}

// Migration is the part of status.migrationState tenure reads. It describes
// the last migration; a new one replaces it. virt-controller writes the
// nodes, pods and start; the target's virt-handler writes
// targetNodeDomainReadyTimestamp once the domain runs there; the source's
// virt-handler writes completed, failed and the end (kubevirt.io/api
// core/v1 VirtualMachineInstanceMigrationState).
type Migration struct {
	SourceNode, TargetNode string
	SourcePod, TargetPod   string
	// DomainReady is targetNodeDomainReadyTimestamp: the guest runs on the
	// target. KubeVirt documents it as the signal for CNIs to fail the
	// VM's addresses over to the target pod; it comes before completed.
	DomainReady time.Time
	Completed   bool
	Failed      bool
	Start, End  time.Time
}

// migrationKeys are the keys of status.migrationState FromUnstructured
// reads (and Trim keeps).
var migrationKeys = []string{
	"sourceNode", "targetNode", "sourcePod", "targetPod",
	"targetNodeDomainReadyTimestamp", "completed", "failed", "startTimestamp", "endTimestamp",
}

// SwitchedOver reports whether the VM left the source for the target: the
// target's domain runs (DomainReady) or the migration completed, whichever
// came first, and it did not fail. A failed migration leaves (or puts back)
// the VM on the source.
func (m *Migration) SwitchedOver() bool {
	return m != nil && !m.Failed && m.TargetNode != "" && (m.Completed || !m.DomainReady.IsZero())
}

// Signal is when the switchover, or the failure, was signalled and by which
// field: targetNodeDomainReadyTimestamp, else endTimestamp (written with
// completed or failed). Zero when neither is recorded. KubeVirt writes both
// with one-second resolution.
func (m *Migration) Signal() (time.Time, string) {
	switch {
	case m == nil:
		return time.Time{}, ""
	case !m.Failed && !m.DomainReady.IsZero():
		return m.DomainReady, "targetNodeDomainReadyTimestamp"
	case (m.Completed || m.Failed) && !m.End.IsZero():
		return m.End, "endTimestamp"
	}
	return time.Time{}, ""
}

// Node is the node the VM runs on: the target of a migration that switched
// over (SwitchedOver; KubeVirt moves status.nodeName only after completed,
// and the guest runs on the target from targetNodeDomainReadyTimestamp),
// else status.nodeName. "" when it runs nowhere yet.
func (v VMI) Node() string {
	if v.Migration.SwitchedOver() {
		return v.Migration.TargetNode
	}
	return v.NodeName
}

// Migrating reports whether a migration is under way: started, not
// switched over, not failed. The VM still runs on NodeName meanwhile.
func (v VMI) Migrating() bool {
	return v.Migration != nil && !v.Migration.SwitchedOver() && !v.Migration.Completed && !v.Migration.Failed
}

// FromUnstructured reads a VirtualMachineInstance. Fields of the wrong type
// read as absent: a VMI tenure cannot read runs nowhere it knows of.
func FromUnstructured(u *unstructured.Unstructured) VMI {
	v := VMI{Namespace: u.GetNamespace(), Name: u.GetName()}
	v.NodeName, _, _ = unstructured.NestedString(u.Object, "status", "nodeName")
	if ms, ok, _ := unstructured.NestedMap(u.Object, "status", "migrationState"); ok {
		m := &Migration{}
		m.SourceNode, _, _ = unstructured.NestedString(ms, "sourceNode")
		m.TargetNode, _, _ = unstructured.NestedString(ms, "targetNode")
		m.SourcePod, _, _ = unstructured.NestedString(ms, "sourcePod")
		m.TargetPod, _, _ = unstructured.NestedString(ms, "targetPod")
		m.Completed, _, _ = unstructured.NestedBool(ms, "completed")
		m.Failed, _, _ = unstructured.NestedBool(ms, "failed")
		m.DomainReady = timeField(ms, "targetNodeDomainReadyTimestamp")
		m.Start = timeField(ms, "startTimestamp")
		m.End = timeField(ms, "endTimestamp")
		v.Migration = m
	}
	v.ActivePods = activePods(u)
	return v
}

// timeField reads a metav1.Time field (RFC 3339); absent or unparsable
// reads as zero.
func timeField(m map[string]any, key string) time.Time {
	s, ok := m[key].(string)
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Trim is an informer transform: it keeps of a VirtualMachineInstance only
// its identity and the status fields FromUnstructured reads. A VMI is tens
// of kilobytes (the whole domain spec); the agent holds every VMI of the
// cluster.
var Trim = transform(func(u, out *unstructured.Unstructured) {
	if n, ok, _ := unstructured.NestedString(u.Object, "status", "nodeName"); ok {
		_ = unstructured.SetNestedField(out.Object, n, "status", "nodeName")
	}
	if ms, ok, _ := unstructured.NestedMap(u.Object, "status", "migrationState"); ok {
		keep := map[string]any{}
		for _, k := range migrationKeys {
			if v, ok := ms[k]; ok {
				keep[k] = v
			}
		}
		_ = unstructured.SetNestedMap(out.Object, keep, "status", "migrationState")
	}
	if pods := activePods(u); pods != nil {
		keep := make(map[string]any, len(pods))
		for uid, node := range pods {
			keep[uid] = node
		}
		_ = unstructured.SetNestedMap(out.Object, keep, "status", "activePods")
	}
})

// activePods reads status.activePods; entries whose node is no string
// read as absent, and nil when there is no such map.
func activePods(u *unstructured.Unstructured) map[string]string {
	raw, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "activePods")
	m, isMap := raw.(map[string]any)
	if !ok || !isMap {
		return nil
	}
	out := make(map[string]string, len(m))
	for uid, node := range m {
		if n, isString := node.(string); isString {
			out[uid] = n
		}
	}
	return out
}

// transform is an informer transform that hands trim an unstructured object
// and its identity (out), to which trim copies what is kept; objects of
// other types pass as they are.
func transform(trim func(u, out *unstructured.Unstructured)) func(any) (any, error) {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		out := identity(u)
		trim(u, out)
		return out, nil
	}
}

// identity is an object with only u's type and identity: what an informer
// and its store need (namespace/name, UID, resourceVersion) and whether it
// is being deleted.
func identity(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	return out
}

// OwnerVMI names the VirtualMachineInstance an object belongs to, from its
// ownerReferences: a KubeVirt VirtualMachine (the IPAMClaims KubeVirt's IPAM
// extension makes are owned by the VM, whose VMI has the VM's name) or a
// VirtualMachineInstance (a VMI without a VM owns its claims, and the
// controller of every virt-launcher pod is its VMI). The VMI is in the
// object's namespace.
func OwnerVMI(refs []metav1.OwnerReference) (string, bool) {
	for _, r := range refs {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil || gv.Group != Group || r.Name == "" {
			continue
		}
		if r.Kind == "VirtualMachine" || r.Kind == "VirtualMachineInstance" {
			return r.Name, true
		}
	}
	return "", false
}

// Lookup returns a cached VirtualMachineInstance.
type Lookup func(namespace, name string) (VMI, bool)

// VMOf finds the VirtualMachineInstance behind a claim presented by a pod,
// both in namespace: the VMI named by the claim's ownerReferences, else by
// the pod's. ok is false, and the caller falls back to its rule without
// KubeVirt, when lookup is nil (the API does not serve VMIs), neither names
// a VMI that exists, or the VMI runs on no node yet.
func VMOf(lookup Lookup, namespace string, claimOwners, podOwners []metav1.OwnerReference) (VMI, bool) {
	if lookup == nil {
		return VMI{}, false
	}
	for _, refs := range [][]metav1.OwnerReference{claimOwners, podOwners} {
		name, ok := OwnerVMI(refs)
		if !ok {
			continue
		}
		if v, ok := lookup(namespace, name); ok && v.Node() != "" {
			return v, true
		}
	}
	return VMI{}, false
}
