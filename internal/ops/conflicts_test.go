package ops

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

func conflictEvent(name, network, address, mac string, at time.Time, count int32) corev1.Event {
	return corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{
			reservation.AnnotationConflictNetwork: network, reservation.AnnotationConflictAddress: address,
			reservation.AnnotationConflictMAC: mac, reservation.AnnotationConflictInterface: "san0",
		}},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p-" + name},
		Reason:         reservation.EventAddressConflict, Type: corev1.EventTypeWarning,
		Source:        corev1.EventSource{Component: "tenure-agent", Host: "node-a"},
		LastTimestamp: metav1.NewTime(at), Count: count,
	}
}

func TestFindAddressConflicts(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	heldAfter := podRes("san", "10.0.0.7", "ns", "b", "ub", "node-a")
	heldAfter.Spec.CNINetwork = "san"
	heldAfter.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
	heldBefore := podRes("san", "10.0.0.8", "ns", "c", "uc", "node-a")
	heldBefore.Spec.CNINetwork = "san"
	heldBefore.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	other := conflictEvent("e4", "san", "10.0.0.9", "02:00:00:00:00:09", t0, 1)
	other.Reason = "AddFailed"
	for _, tc := range []struct {
		name   string
		events []corev1.Event
		rs     []*tenurev1alpha1.IPReservation
		want   []string
		has    []string
	}{
		{"one squatter, two Events: one finding of the latest, every MAC",
			[]corev1.Event{conflictEvent("e1", "san", "10.0.0.5", "02:00:00:00:00:05", t0, 3), conflictEvent("e2", "san", "10.0.0.5", "02:00:00:00:00:55", t0.Add(time.Second), 1)}, nil,
			[]string{"AddressConflict Event ns/e2"}, []string{"10.0.0.5 answered on the wire from MAC 02:00:00:00:00:05, 02:00:00:00:00:55 (4 times", "node node-a on san0"}},
		{"handed out after it stopped answering: no finding",
			[]corev1.Event{conflictEvent("e1", "san", "10.0.0.7", "02:00:00:00:00:07", t0, 1)}, []*tenurev1alpha1.IPReservation{heldAfter}, nil, nil},
		{"a reservation older than the answer does not clear it",
			[]corev1.Event{conflictEvent("e1", "san", "10.0.0.8", "02:00:00:00:00:08", t0, 1)}, []*tenurev1alpha1.IPReservation{heldBefore},
			[]string{"AddressConflict Event ns/e1"}, []string{"02:00:00:00:00:08"}},
		{"the same address on another network is its own finding",
			[]corev1.Event{conflictEvent("e1", "san", "10.0.0.7", "02:00:00:00:00:07", t0, 1), conflictEvent("e3", "lab", "10.0.0.7", "02:00:00:00:00:17", t0, 1)}, []*tenurev1alpha1.IPReservation{heldAfter},
			[]string{"AddressConflict Event ns/e3"}, []string{"02:00:00:00:00:17"}},
		{"other Events are not read", []corev1.Event{other}, nil, nil, nil},
	} {
		wantFindings(t, tc.name, FindAddressConflicts(tc.events, tc.rs), tc.want, tc.has...)
	}
}
