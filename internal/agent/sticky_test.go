package agent

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/claims"
)

// Helpers of the TestHandle cases for requested addresses and sticky
// StatefulSet pods, and the tests that look at the objects they write.

const (
	dual = `{"cniVersion":"1.1.0","name":"dual","type":"macvlan","ipam":{"type":"tenure","gateway":"10.2.0.1","network_name":"dual",` +
		`"ipRanges":[{"range":"10.2.0.0/24","exclude":["10.2.0.200/29"]},{"range":"fd00::/120"}]}}`
	stickyNet = `{"cniVersion":"1.1.0","name":"san","type":"macvlan","ipam":{"type":"tenure","range":"10.0.0.0/29","network_name":"san","sticky_statefulsets":true}}`
)

var stickyAnn = map[string]string{claims.StickyAnnotation: "true"}

// withIPs puts runtimeConfig.ips into a network config, as libcni does for
// a delegate with the "ips" capability.
func withIPs(conf string, ips ...string) string {
	return strings.Replace(conf, `{"cniVersion"`, `{"runtimeConfig":{"ips":["`+strings.Join(ips, `","`)+`"]},"cniVersion"`, 1)
}

const stsUID = "sts-uid-db"

// stsPod is a pod of StatefulSet db on this node.
func stsPod(name, uid string, annotations map[string]string) *corev1.Pod {
	yes := true
	p := pod(name, thisNode, annotations)
	p.UID = types.UID(uid)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: stsUID, Controller: &yes, BlockOwnerDeletion: &yes}}
	return p
}

// recreate deletes the pod called name and creates it again with uid, as
// the StatefulSet controller does.
func recreate(name, uid string) func(h *harness) {
	return func(h *harness) {
		old := &corev1.Pod{}
		if err := h.fake.Get(h.ctx, client.ObjectKey{Namespace: "ns", Name: name}, old); err != nil {
			h.t.Fatal(err)
		}
		if err := h.fake.Delete(h.ctx, old); err != nil {
			h.t.Fatal(err)
		}
		if err := h.fake.Create(h.ctx, stsPod(name, uid, old.Annotations)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// wantHeld fails unless the API's reservations are exactly want.
func (h *harness) wantHeld(want []string) {
	h.t.Helper()
	if got := h.held(); !slices.Equal(got, want) {
		h.t.Fatalf("reservations %v, want %v", got, want)
	}
}

// TestStickyClaimRecordsTheStatefulSet: the claim a sticky pod's ADD
// creates says which StatefulSet and pod it is for, is owned by the
// StatefulSet without blocking its deletion, records the address and
// prefix, and CHECK of a later sandbox of the pod finds them.
func TestStickyClaimRecordsTheStatefulSet(t *testing.T) {
	h := startAgent(t, stsPod("db-1", "uid-db-1", stickyAnn))
	addrs := ips(t, h.do(call{cmd: "ADD", ctr: "c1", pod: "db-1", conf: vmNet}))
	cl := h.recorded("db-1.net1")
	if cl.Labels[claims.LabelSticky] != "true" || cl.Labels[claims.LabelStatefulSet] != "db" || cl.Annotations[claims.AnnotationPod] != "db-1" {
		t.Errorf("labels %v annotations %v", cl.Labels, cl.Annotations)
	}
	if len(cl.OwnerReferences) != 1 || cl.OwnerReferences[0].UID != stsUID || *cl.OwnerReferences[0].Controller || *cl.OwnerReferences[0].BlockOwnerDeletion {
		t.Errorf("ownerReferences %+v, want StatefulSet db, neither controller nor blocking", cl.OwnerReferences)
	}
	if cl.Spec.Network != "vm-net" || cl.Spec.Interface != "net1" || len(cl.Status.IPs) != 1 || !strings.HasPrefix(cl.Status.IPs[0], addrs[0]+"/") ||
		len(cl.Status.DelegatedPrefixes) != 1 {
		t.Errorf("claim spec %+v status %+v after ADD gave %v", cl.Spec, cl.Status, addrs)
	}
	creates := h.fake.Creates()
	recreate("db-1", "uid-db-1-b")(h)
	again := ips(t, h.do(call{cmd: "ADD", ctr: "c2", pod: "db-1", uid: "uid-db-1-b", conf: vmNet}))
	if !slices.Equal(addrs, again) || h.fake.Creates() != creates+1 { // the re-created pod, nothing else
		t.Fatalf("re-created pod got %v (first %v) with %d creates, want the same and only the pod's", again, addrs, h.fake.Creates()-creates)
	}
	if r := h.do(call{cmd: "CHECK", ctr: "c2", pod: "db-1", uid: "uid-db-1-b", conf: vmNet, prev: again}); r.Error != nil {
		t.Fatalf("CHECK of the re-created pod's sandbox: %+v", r.Error)
	}
}
