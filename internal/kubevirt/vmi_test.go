package kubevirt

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func vmiObject(status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"namespace": "vms", "name": "vm1", "uid": "u1", "resourceVersion": "7"},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
	}}
	if status != nil {
		u.Object["status"] = status
	}
	return u
}

func TestNode(t *testing.T) {
	cases := []struct {
		name      string
		status    map[string]any
		node      string
		migrating bool
	}{
		{"not scheduled", nil, "", false},
		{"running", map[string]any{"nodeName": "a"}, "a", false},
		{"migration under way", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b"}}, "a", true},
		{"completed, nodeName not moved yet", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "completed": true}}, "b", false},
		{"switched over", map[string]any{"nodeName": "b", "migrationState": map[string]any{"targetNode": "b", "completed": true}}, "b", false},
		{"failed", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "completed": true, "failed": true}}, "a", false},
		{"failed before completing", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "failed": true}}, "a", false},
		{"target domain ready, not completed", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": "2026-12-02T01:00:00Z"}}, "b", false},
		{"target domain ready, then failed", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": "2026-12-02T01:00:00Z", "completed": true, "failed": true}}, "a", false},
		{"unparsable domain-ready timestamp reads as absent", map[string]any{"nodeName": "a", "migrationState": map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": "soon"}}, "a", true},
		{"wrong types read as absent", map[string]any{"nodeName": 7, "migrationState": map[string]any{"targetNode": "b", "completed": "yes"}}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := vmiObject(c.status)
			v := FromUnstructured(u)
			if v.Node() != c.node || v.Migrating() != c.migrating || v.Namespace != "vms" || v.Name != "vm1" {
				t.Fatalf("%+v: Node %q Migrating %v, want %q %v", v, v.Node(), v.Migrating(), c.node, c.migrating)
			}
			trimmed, err := Trim(u)
			if err != nil {
				t.Fatal(err)
			}
			tu := trimmed.(*unstructured.Unstructured)
			if _, has := tu.Object["spec"]; has {
				t.Errorf("Trim kept the spec")
			}
			if tv := FromUnstructured(tu); tv.Node() != v.Node() || tv.Migrating() != v.Migrating() || tu.GetResourceVersion() != "7" {
				t.Errorf("trimmed %+v reads differently from %+v", tv, v)
			}
		})
	}
}

func TestVMOf(t *testing.T) {
	vm := []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1"}}
	vmi := []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm2"}}
	other := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "vm1"}, {APIVersion: "example.com/v1", Kind: "VirtualMachine", Name: "vm1"}}
	lookup := func(ns, name string) (VMI, bool) {
		switch ns + "/" + name {
		case "vms/vm1":
			return VMI{Namespace: ns, Name: name, NodeName: "a"}, true
		case "vms/vm2":
			return VMI{Namespace: ns, Name: name, NodeName: "b"}, true
		case "vms/pending":
			return VMI{Namespace: ns, Name: name}, true
		}
		return VMI{}, false
	}
	pending := []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "pending"}}
	cases := []struct {
		name       string
		lookup     Lookup
		claim, pod []metav1.OwnerReference
		vmi        string
		ok         bool
	}{
		{"not served", nil, vm, vmi, "", false},
		{"claim owned by the VM", lookup, vm, nil, "vm1", true},
		{"claim's owner wins over the pod's", lookup, vm, vmi, "vm1", true},
		{"pod's controller VMI", lookup, nil, vmi, "vm2", true},
		{"owners of other groups", lookup, other, nil, "", false},
		{"VMI runs nowhere yet", lookup, pending, nil, "", false},
		{"VMI runs nowhere yet, the pod's does", lookup, pending, vmi, "vm2", true},
		{"VMI missing", lookup, []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "gone"}}, nil, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, ok := VMOf(c.lookup, "vms", c.claim, c.pod)
			if ok != c.ok || v.Name != c.vmi {
				t.Fatalf("VMOf = %+v, %v; want %q, %v", v, ok, c.vmi, c.ok)
			}
		})
	}
}

func TestCRDServes(t *testing.T) {
	crd := func(served bool, established string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"spec": map[string]any{"versions": []any{
				map[string]any{"name": "v1alpha3", "served": true},
				map[string]any{"name": "v1", "served": served},
			}},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "NamesAccepted", "status": "True"},
				map[string]any{"type": "Established", "status": established},
			}},
		}}
	}
	if !crdServes(crd(true, "True"), "v1") {
		t.Error("an Established CRD serving v1 is not seen as serving")
	}
	if crdServes(crd(false, "True"), "v1") {
		t.Error("v1 not served, yet seen as serving")
	}
	if crdServes(crd(true, "False"), "v1") {
		t.Error("not Established, yet seen as serving")
	}
	if crdServes(&unstructured.Unstructured{Object: map[string]any{}}, "v1") {
		t.Error("an empty object is seen as serving")
	}
}

func TestTrimCRDKeepsWhatServedReads(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": CRDName, "resourceVersion": "3"},
		"spec": map[string]any{"group": "kubevirt.io", "versions": []any{
			map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}}},
		}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True", "message": "the initial names have been accepted"}}},
	}}
	got, err := trimCRD(u)
	if err != nil {
		t.Fatal(err)
	}
	tu := got.(*unstructured.Unstructured)
	if !crdServes(tu, "v1") || tu.GetName() != CRDName || tu.GetResourceVersion() != "3" {
		t.Fatalf("trimmed CRD %v no longer reads as serving v1", tu.Object)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(tu.Object, "spec", "versions"); !found {
		t.Fatal("versions dropped")
	}
	if v, _, _ := unstructured.NestedSlice(tu.Object, "spec", "versions"); len(v) != 1 || len(v[0].(map[string]any)) != 2 {
		t.Fatalf("versions kept %v, want name and served only", v)
	}
}

func TestMigrationSignal(t *testing.T) {
	ready, end := "2026-12-02T01:00:00Z", "2026-12-02T01:00:03Z"
	cases := []struct {
		name   string
		ms     map[string]any
		at     string
		signal string
	}{
		{"started", map[string]any{"targetNode": "b", "startTimestamp": "2026-12-02T00:59:00Z"}, "", ""},
		{"domain ready", map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": ready}, ready, "targetNodeDomainReadyTimestamp"},
		{"domain ready and completed", map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": ready, "completed": true, "endTimestamp": end}, ready, "targetNodeDomainReadyTimestamp"},
		{"completed first", map[string]any{"targetNode": "b", "completed": true, "endTimestamp": end}, end, "endTimestamp"},
		{"failed after domain ready", map[string]any{"targetNode": "b", "targetNodeDomainReadyTimestamp": ready, "completed": true, "failed": true, "endTimestamp": end}, end, "endTimestamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := FromUnstructured(vmiObject(map[string]any{"nodeName": "a", "migrationState": c.ms}))
			at, signal := v.Migration.Signal()
			want := time.Time{}
			if c.at != "" {
				want, _ = time.Parse(time.RFC3339, c.at)
			}
			if !at.Equal(want) || signal != c.signal {
				t.Fatalf("Signal() = %v %q, want %v %q", at, signal, want, c.signal)
			}
		})
	}
}

func TestActivePodsSurviveTrim(t *testing.T) {
	u := vmiObject(map[string]any{"nodeName": "a", "activePods": map[string]any{"uid-src": "a", "uid-dst": "b", "uid-bad": int64(7)},
		"migrationState": map[string]any{"targetNode": "b", "targetPod": "dst"}})
	trimmed, err := Trim(u)
	if err != nil {
		t.Fatal(err)
	}
	v := FromUnstructured(trimmed.(*unstructured.Unstructured))
	if len(v.ActivePods) != 2 || v.ActivePods["uid-src"] != "a" || v.ActivePods["uid-dst"] != "b" {
		t.Fatalf("activePods read as %v after Trim, want uid-src on a and uid-dst on b", v.ActivePods)
	}
	for _, tc := range []struct {
		uid, name, node string
		want            bool
	}{
		{"uid-src", "src", "a", true},
		{"uid-dst", "dst", "b", true},
		{"uid-x", "dst", "b", true},
		{"uid-x", "dst", "a", false},
		{"uid-src", "src", "b", false},
		{"uid-bad", "bad", "a", false},
		{"", "", "a", false},
	} {
		if got := v.RunsPod(tc.uid, tc.name, tc.node); got != tc.want {
			t.Errorf("RunsPod(%q, %q, %q) = %v, want %v", tc.uid, tc.name, tc.node, got, tc.want)
		}
	}
}
