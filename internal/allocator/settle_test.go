package allocator_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/allocator"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// lossyWriter writes through to the API and then loses the reply of the
// first lose Creates (io.ErrUnexpectedEOF, as a connection reset after the
// request went out), committing them first when commit is set.
type lossyWriter struct {
	client.Client
	lose   atomic.Int32
	commit bool
}

func (w *lossyWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if w.lose.Add(-1) < 0 {
		return w.Client.Create(ctx, obj, opts...)
	}
	if w.commit {
		if err := w.Client.Create(ctx, obj.DeepCopyObject().(client.Object), opts...); err != nil {
			return err
		}
	}
	return io.ErrUnexpectedEOF
}

// deafReader fails every read, as an API server that is down does.
type deafReader struct{ client.Reader }

func (deafReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
}

func attachmentOwner(uid, ctr string) allocator.Template {
	t := owner(uid)
	t.Owner.ContainerID, t.Owner.Interface = ctr, "net1"
	return t
}

// ownedBy lists the API's reservations of owner uid, by name.
func ownedBy(t *testing.T, c client.Reader, uid string) []string {
	t.Helper()
	var list tenurev1alpha1.IPReservationList
	if err := c.List(context.Background(), &list, client.MatchingLabels{reservation.LabelOwnerUID: uid}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, r.Name)
	}
	return names
}

// TestCreateOfUnknownOutcomeIsSettledByRead: a Create that committed but
// whose reply was lost is read back, and its object is the answer: one
// reservation, the one answered, not a second at the next address.
func TestCreateOfUnknownOutcomeIsSettledByRead(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	w := &lossyWriter{Client: f.Writer, commit: true}
	w.lose.Store(1)
	f.Writer = w
	a := f.For("settle-committed", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.61.0.0/24"}`)})
	r, err := a.AllocateNext(ctx, attachmentOwner("u-committed", "c1"))
	if err != nil {
		t.Fatalf("a committed create whose reply was lost: %v, want its reservation", err)
	}
	if got := ownedBy(t, f.Live, "u-committed"); len(got) != 1 || got[0] != r.Name {
		t.Fatalf("the API holds %v for the owner, want only %s (the answer)", got, r.Name)
	}
	if r.UID == "" || r.Spec.Owner.ContainerID != "c1" {
		t.Fatalf("answer %+v is not the object read back", r)
	}
}

// TestCreateLostBeforeCommitIsSentAgain: a Create whose reply was lost and
// that did not commit is sent again under the same name.
func TestCreateLostBeforeCommitIsSentAgain(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	w := &lossyWriter{Client: f.Writer}
	w.lose.Store(1)
	f.Writer = w
	a := f.For("settle-lost", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.62.0.0/24"}`)})
	r, err := a.AllocateNext(ctx, attachmentOwner("u-lost", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ownedBy(t, f.Live, "u-lost"); len(got) != 1 || got[0] != r.Name {
		t.Fatalf("the API holds %v for the owner, want only %s", got, r.Name)
	}
}

// TestUnsettledCreateKeepsItsName: when the outcome cannot be read in time
// the call answers UnsettledError, the name stays set aside for the owner
// (no other allocation on the node picks it), and a later Settle answers
// the committed object.
func TestUnsettledCreateKeepsItsName(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	live := f.Live
	w := &lossyWriter{Client: f.Writer, commit: true}
	w.lose.Store(1)
	f.Writer, f.Live, f.SettleTimeout = w, deafReader{live}, 300*time.Millisecond
	a := f.For("settle-unsettled", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.63.0.0/30"}`)})
	_, err := a.AllocateNext(ctx, attachmentOwner("u-unsettled", "c1"))
	var unsettled *allocator.UnsettledError
	if !errors.As(err, &unsettled) {
		t.Fatalf("unreadable outcome: %v, want UnsettledError", err)
	}
	committed := ownedBy(t, live, "u-unsettled")
	if len(committed) != 1 || committed[0] != unsettled.Name {
		t.Fatalf("the API holds %v, the unsettled name is %s", committed, unsettled.Name)
	}
	u, ok := f.Store.Unsettled(unsettled.Name)
	if !ok || u.Spec.Owner.ContainerID != "c1" {
		t.Fatalf("%s is not marked as possibly c1's", unsettled.Name)
	}
	if !f.Store.Taken(u.Name) {
		t.Fatalf("%s must stay set aside", unsettled.Name)
	}
	f.Live = live
	r, err := f.Settle(ctx, u, true)
	if err != nil || r == nil || r.Name != unsettled.Name || r.UID == "" {
		t.Fatalf("Settle: %v, %v; want the committed %s", r, err, unsettled.Name)
	}
	if _, still := f.Store.Unsettled(unsettled.Name); still {
		t.Fatal("a settled name must not stay unsettled")
	}
	if got := ownedBy(t, live, "u-unsettled"); len(got) != 1 {
		t.Fatalf("the API holds %v for the owner, want one", got)
	}
}

// TestSettledNameOfAnotherIsRefused: a name found held by another
// attachment is AlreadyExists, and the search moves on to a free one.
func TestSettledNameOfAnotherIsRefused(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	a := f.For("settle-other", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.64.0.0/24"}`)})
	theirs, err := a.AllocateNext(ctx, attachmentOwner("u-them", "c9"))
	if err != nil {
		t.Fatal(err)
	}
	mine := theirs.DeepCopy()
	mine.Spec.Owner = attachmentOwner("u-me", "c1").Owner
	if r, err := f.Settle(ctx, mine, true); r != nil || err == nil {
		t.Fatalf("settling a name another attachment holds: %v, %v; want AlreadyExists", r, err)
	}
}

// TestNoFalseFullWhenTheAttachmentHolds: an attachment whose reservation
// the caller did not know of (an earlier attempt's) is never told its
// range is full: it gets that reservation. Another attachment is told.
func TestNoFalseFullWhenTheAttachmentHolds(t *testing.T) {
	ctx := context.Background()
	f, _ := newFactory(t, "n1")
	a := f.For("settle-full", addrspace.AddressSpace{Range: rangeOf(t, `{"type":"tenure","range":"10.65.0.0/30"}`)})
	held, err := a.Allocate(ctx, netip.MustParsePrefix("10.65.0.1/32"), attachmentOwner("u-holder", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, netip.MustParsePrefix("10.65.0.2/32"), attachmentOwner("u-other", "c2")); err != nil {
		t.Fatal(err)
	}
	r, err := a.AllocateNext(ctx, attachmentOwner("u-holder", "c1"))
	if err != nil || r.Name != held.Name {
		t.Fatalf("the holder's ADD into its full range: %v, %v; want its %s", r, err, held.Name)
	}
	_, err = a.AllocateNext(ctx, attachmentOwner("u-holder", "c-new-sandbox"))
	if !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("another sandbox of the owner: %v, want full", err)
	}
	if got := ownedBy(t, f.Live, "u-holder"); len(got) != 1 || got[0] != held.Name {
		t.Fatalf("the API holds %v for the holder, want only %s", got, held.Name)
	}
}
