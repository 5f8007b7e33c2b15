package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/kube"
)

// Component is the Event source and the controller's name.
const Component = "tenure-controller"

// EventReason is the reason of the Event recorded for every release; the
// release reason (repair.Reason) is in its message.
const EventReason = "ReleasedOrphan"

// EventRecorder is what the controller needs of record.EventRecorder.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// NewEventRecorder returns an asynchronous core/v1 Event recorder (with
// client-go's aggregation and spam filtering) and its shutdown function.
func NewEventRecorder(cfg *rest.Config) (EventRecorder, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	host, _ := os.Hostname()
	return b.NewRecorder(kube.Scheme, corev1.EventSource{Component: Component, Host: host}), b.Shutdown, nil
}

// SyncEventRecorder writes each Event before returning, for the one-shot
// `--once` command, which exits right after its sweep (an asynchronous
// recorder would lose what it had not sent yet).
type SyncEventRecorder struct {
	Client client.Client
	Log    *slog.Logger
}

// Eventf implements EventRecorder.
func (s *SyncEventRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	ref, err := reference.GetReference(kube.Scheme, obj)
	if err != nil {
		s.Log.Info("cannot reference the object of an event", "err", err)
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.Now()
	host, _ := os.Hostname()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", ref.Name, time.Now().UnixNano())},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        fmt.Sprintf(messageFmt, args...),
		Type:           eventtype,
		Source:         corev1.EventSource{Component: Component, Host: host},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Client.Create(ctx, ev); err != nil {
		s.Log.Info("cannot record event", "object", ref.Name, "err", err)
	}
}
