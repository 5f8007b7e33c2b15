package kubefake

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
)

func resv(name string, lbls map[string]string) *tenurev1alpha1.IPReservation {
	return &tenurev1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func metaList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(tenurev1alpha1.GroupVersion.WithKind("IPReservationList"))
	return l
}

// from is the option a reflector passes to watch from a List.
func from(list client.ObjectList) *client.ListOptions {
	return &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}}
}

func openWatch(t *testing.T, c *Client, list client.ObjectList, opts ...client.ListOption) watch.Interface {
	t.Helper()
	w, err := c.Watch(t.Context(), list, opts...)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

// expect reads the watch's next event and checks its type and object name.
func expect(t *testing.T, w watch.Interface, typ watch.EventType, name string) runtime.Object {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed; want %s %s", typ, name)
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			t.Fatalf("event %s of %T: %v", ev.Type, ev.Object, err)
		}
		if ev.Type != typ || m.GetName() != name {
			t.Fatalf("event %s %s; want %s %s", ev.Type, m.GetName(), typ, name)
		}
		return ev.Object
	case <-time.After(10 * time.Second):
		t.Fatalf("no event; want %s %s", typ, name)
	}
	return nil
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %s: %v", obj.GetName(), err)
	}
}

func TestWatchFromListSendsTheWritesSinceTheList(t *testing.T) {
	c := New(resv("kept", nil), resv("gone", nil))
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("made", nil))
	kept := &tenurev1alpha1.IPReservation{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "kept"}, kept); err != nil {
		t.Fatal(err)
	}
	kept.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(t.Context(), kept); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), resv("gone", nil)); err != nil {
		t.Fatal(err)
	}
	// Another kind's write is not this watch's.
	create(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "made"}})

	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(list))
	if r := expect(t, w, watch.Added, "made").(*tenurev1alpha1.IPReservation); r.UID == "" {
		t.Error("the replayed create has no UID: it is not the object as written")
	}
	kept = expect(t, w, watch.Modified, "kept").(*tenurev1alpha1.IPReservation)
	if kept.Labels["touched"] != "yes" {
		t.Errorf("the replayed update carries labels %v, not the update's", kept.Labels)
	}
	expect(t, w, watch.Deleted, "gone")
	// Then live events, each once: the next is the next write.
	create(t, c, resv("later", nil))
	if live := expect(t, w, watch.Added, "later").(*tenurev1alpha1.IPReservation); live.TypeMeta != kept.TypeMeta {
		t.Errorf("a live event's object is of %v, a replayed one's of %v", live.TypeMeta, kept.TypeMeta)
	}

	// A watch from "now" sends none of the earlier writes.
	now := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: ""}})
	create(t, c, resv("latest", nil))
	expect(t, now, watch.Added, "latest")
}

func TestMetadataWatchFromListSendsTheDeleteSinceTheList(t *testing.T) {
	c := New(resv("a", nil), resv("b", nil))
	list := metaList()
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("listed %d; want a and b", len(list.Items))
	}
	// Deleted by its metadata, as the agent and the controller delete.
	gone := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	gone.SetGroupVersionKind(tenurev1alpha1.GroupVersion.WithKind("IPReservation"))
	if err := c.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	w := openWatch(t, c, metaList(), from(list))
	if _, ok := expect(t, w, watch.Deleted, "a").(*metav1.PartialObjectMetadata); !ok {
		t.Error("a metadata-only watch replayed a whole object")
	}
	if err := c.Delete(t.Context(), resv("b", nil)); err != nil {
		t.Fatal(err)
	}
	expect(t, w, watch.Deleted, "b")
}

func TestWatchFromListReplaysOnlyWhatItsSelectorMatches(t *testing.T) {
	c := New()
	sel := client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{"block": "x"})}
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), list, sel); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("other-block", map[string]string{"block": "y"}))
	create(t, c, resv("in-block", map[string]string{"block": "x"}))
	create(t, c, resv("no-block", nil))

	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(list), sel)
	expect(t, w, watch.Added, "in-block")
	create(t, c, resv("other-block-2", map[string]string{"block": "y"}))
	create(t, c, resv("in-block-2", map[string]string{"block": "x"}))
	expect(t, w, watch.Added, "in-block-2")
}

func TestWatchFromAListOlderThanTheLogIsGone(t *testing.T) {
	c := New()
	c.logLimit = 2
	old := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("one", nil))
	recent := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), recent); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("two", nil))
	create(t, c, resv("three", nil))

	if w, err := c.Watch(t.Context(), &tenurev1alpha1.IPReservationList{}, from(old)); !apierrors.IsResourceExpired(err) {
		if w != nil {
			w.Stop()
		}
		t.Fatalf("watch from a list 3 writes back with a log of 2: %v; want 410 Gone", err)
	}
	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(recent))
	expect(t, w, watch.Added, "two")
	expect(t, w, watch.Added, "three")
}

// A create whose reply is lost after the commit still happened.
func TestACreateAfterCreateFailsIsSentAllTheSame(t *testing.T) {
	c := New()
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	lost := errors.New("reply lost")
	c.AfterCreate = func(client.Object) error { return lost }
	if err := c.Create(t.Context(), resv("committed", nil)); !errors.Is(err, lost) {
		t.Fatalf("create: %v; want the AfterCreate error", err)
	}
	c.BeforeCreate = func(client.Object) error { return errors.New("refused") }
	if err := c.Create(t.Context(), resv("refused", nil)); err == nil {
		t.Fatal("BeforeCreate's error was not the answer")
	}
	c.BeforeCreate, c.AfterCreate = nil, nil
	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(list))
	expect(t, w, watch.Added, "committed")
	create(t, c, resv("next", nil))
	expect(t, w, watch.Added, "next") // not "refused"
}

func closes(t *testing.T, w watch.Interface) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch's channel never closed")
		}
	}
}

func TestAStoppedWatchEndsEvenWhilePaused(t *testing.T) {
	c := New()
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("held", nil))
	c.Pause()
	defer c.Resume()
	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(list))
	create(t, c, resv("held-too", nil))
	w.Stop()
	w.Stop()
	closes(t, w)
}

func TestPauseHoldsReplayedAndLiveEventsInOrder(t *testing.T) {
	c := New()
	list := &tenurev1alpha1.IPReservationList{}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	create(t, c, resv("before-watch", nil))
	c.Pause()
	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{}, from(list))
	// Far more than the inner fake's channel holds: it must not fill.
	for _, n := range []string{"a", "b", "c"} {
		for i := range 60 {
			create(t, c, resv(n+string(rune('a'+i%26))+string(rune('a'+i/26)), nil))
		}
	}
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("event %s while paused", ev.Type)
	default:
	}
	c.Resume()
	expect(t, w, watch.Added, "before-watch")
	expect(t, w, watch.Added, "aaa")
}

func TestBreakWatchesEndsOpenWatches(t *testing.T) {
	c := New()
	w := openWatch(t, c, &tenurev1alpha1.IPReservationList{})
	create(t, c, resv("sent", nil))
	expect(t, w, watch.Added, "sent")
	c.BreakWatches()
	closes(t, w)
}

// listThenWrite is a client whose first List of IPReservations is followed
// by a write before the List returns: the write commits after the List
// and before the reflector's Watch, every time.
type listThenWrite struct {
	*Client
	write func()
	done  atomic.Bool
}

func (l *listThenWrite) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if !l.done.Swap(true) {
		l.write()
	}
	return nil
}

func TestInformerGetsTheWriteBetweenItsListAndWatch(t *testing.T) {
	c := New()
	lc := &listThenWrite{Client: c, write: func() { create(t, c, resv("between", nil)) }}
	inf := kube.NewInformer(lc, func() client.ObjectList { return &tenurev1alpha1.IPReservationList{} }, &tenurev1alpha1.IPReservation{}, nil)
	go inf.Run(t.Context().Done())
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok, err := inf.GetStore().GetByKey("between")
		return ok, err
	}); err != nil {
		t.Fatalf("the informer never got the create made between its List and its Watch: %v", err)
	}
}

func TestMetadataInformerGetsTheDeleteBetweenItsListAndWatch(t *testing.T) {
	c := New(resv("doomed", nil), resv("stays", nil))
	lc := &listThenWrite{Client: c, write: func() {
		if err := c.Delete(context.Background(), resv("doomed", nil)); err != nil {
			t.Errorf("delete: %v", err)
		}
	}}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(tenurev1alpha1.GroupVersion.WithKind("IPReservation"))
	inf := kube.NewInformer(lc, func() client.ObjectList { return metaList() }, obj, nil)
	deleted := make(chan any, 1)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) { deleted <- o }}); err != nil {
		t.Fatal(err)
	}
	go inf.Run(t.Context().Done())
	select {
	case o := <-deleted:
		m, ok := o.(*metav1.PartialObjectMetadata)
		if !ok || m.Name != "doomed" {
			t.Fatalf("delete event of %#v; want doomed's metadata (a watch event, not a relist's tombstone)", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the informer never got the delete made between its List and its Watch")
	}
	if _, ok, _ := inf.GetStore().GetByKey("stays"); !ok {
		t.Error("stays is not in the informer's store")
	}
	if _, ok, _ := inf.GetStore().GetByKey("doomed"); ok {
		t.Error("doomed is still in the informer's store")
	}
}

func TestStatusWritesPatchesAppliesAndDeleteAllOfAreReplayed(t *testing.T) {
	claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim"}}
	c := New(claim,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm1", Labels: map[string]string{"sweep": "yes"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm2"}})
	claims := &ipamclaimsv1alpha1.IPAMClaimList{}
	if err := c.List(t.Context(), claims); err != nil {
		t.Fatal(err)
	}
	cms := &corev1.ConfigMapList{}
	if err := c.List(t.Context(), cms); err != nil {
		t.Fatal(err)
	}

	if err := c.Get(t.Context(), client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	claim.Status.IPs = []string{"10.0.0.1/24"}
	if err := c.Status().Update(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	cm2 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm2"}}
	if err := c.Patch(t.Context(), cm2, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"patched"}}`))); err != nil {
		t.Fatal(err)
	}
	applied := &unstructured.Unstructured{}
	applied.SetAPIVersion("v1")
	applied.SetKind("ConfigMap")
	applied.SetNamespace("ns")
	applied.SetName("cm3")
	if err := c.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner("test")); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAllOf(t.Context(), &corev1.ConfigMap{}, client.InNamespace("ns"), client.MatchingLabels{"sweep": "yes"}); err != nil {
		t.Fatal(err)
	}

	cw := openWatch(t, c, &ipamclaimsv1alpha1.IPAMClaimList{}, from(claims))
	if got := expect(t, cw, watch.Modified, "claim").(*ipamclaimsv1alpha1.IPAMClaim); len(got.Status.IPs) != 1 {
		t.Errorf("the replayed status update carries status %+v", got.Status)
	}
	mw := openWatch(t, c, &corev1.ConfigMapList{}, from(cms))
	if got := expect(t, mw, watch.Modified, "cm2").(*corev1.ConfigMap); got.Data["k"] != "patched" {
		t.Errorf("the replayed patch carries data %v", got.Data)
	}
	if _, ok := expect(t, mw, watch.Added, "cm3").(*corev1.ConfigMap); !ok {
		t.Error("the replayed apply is not a ConfigMap, as the live event is")
	}
	expect(t, mw, watch.Deleted, "cm1")
}
