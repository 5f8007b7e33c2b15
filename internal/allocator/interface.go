package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Interface is the allocator of one space of one allocation scope
// (Factory.For): what the node agent asks of it to reserve an item.
// Releasing and settling need no space, since a reservation's name says
// its scope and item: they are Factory's (Release, Settle).
type Interface interface {
	// Allocate reserves one given item for the template's owner; an item
	// the owner already holds is returned as is.
	Allocate(ctx context.Context, item netip.Prefix, t Template) (*tenurev1alpha1.IPReservation, error)
	// AllocateNext reserves any free item.
	AllocateNext(ctx context.Context, t Template) (*tenurev1alpha1.IPReservation, error)
}

var (
	// ErrFull: no candidate of the range is free.
	ErrFull = errors.New("range is full")
	// ErrAllocated: the requested item is held by another owner.
	ErrAllocated = errors.New("already allocated to another owner")
	// ErrNotReady: the cache has not synced yet.
	ErrNotReady = errors.New("allocator not ready: reservation cache not synced")
)

// ErrNotInRange is returned by Allocate for an item outside the space.
type ErrNotInRange struct {
	Item       string
	ValidRange string
}

func (e *ErrNotInRange) Error() string {
	return fmt.Sprintf("%s is not in range %s", e.Item, e.ValidRange)
}

// FullError says which range is full and how big it is.
type FullError struct {
	Range    string
	Capacity uint64
}

func (e *FullError) Error() string {
	return fmt.Sprintf("range %s is full: all %d assignable addresses are reserved", e.Range, e.Capacity)
}

func (e *FullError) Is(target error) bool { return target == ErrFull }

// ConflictError names who holds an item that was asked for explicitly.
type ConflictError struct {
	Item   string
	Holder tenurev1alpha1.ReservationOwner
}

func (e *ConflictError) Error() string {
	if e.Holder.Kind == tenurev1alpha1.OwnerAdministrator {
		return fmt.Sprintf("%s is set aside by administrator %s (uid %s)", e.Item, e.Holder.Name, e.Holder.UID)
	}
	return fmt.Sprintf("%s is held by %s %s/%s (uid %s)", e.Item, e.Holder.Kind, e.Holder.Namespace, e.Holder.Name, e.Holder.UID)
}

func (e *ConflictError) Is(target error) bool { return target == ErrAllocated }

// UnsettledError answers a call whose Create's outcome is unknown and could
// not be read back within Factory.SettleTimeout. The name stays set aside
// for its owner (Store.MarkUnsettled), and the next call of the attachment
// settles it first; the runtime should try again (CNI code 11).
type UnsettledError struct {
	Name string
	Err  error
}

func (e *UnsettledError) Error() string {
	return fmt.Sprintf("reservation %s: the answer to its create was lost and it could not be read back in time (%v); try again", e.Name, e.Err)
}

func (e *UnsettledError) Unwrap() error { return e.Err }

// Store is the allocator's view of the cluster's reservations: the cache
// it chooses candidates from, and its assumed writes (its own, which the
// cache has not reported yet), so that two allocations on one node never
// pick the same item. internal/store implements it over informers.
//
// The cache is a window: it holds only part of the cluster's reservations
// (the blocks its node allocates from, and the scopes found full).
// Before the cache pass trusts the cache about a candidate, it makes sure
// the candidate's block is watched (Watching, Watch).
type Store interface {
	// HasSynced reports whether the cache holds the initial list.
	HasSynced() bool
	// Get returns the reservation of that name as the cache knows it.
	Get(name string) (*tenurev1alpha1.IPReservation, bool)
	// Taken reports whether a name is held, counting unconfirmed writes.
	Taken(name string) bool
	// TryAssume marks r's name as ours before its Create is sent; false
	// when the name is already taken.
	TryAssume(r *tenurev1alpha1.IPReservation) bool
	// AssumeOverCache assumes r's name although the cache holds it, for
	// when a live read showed the cache stale; false when this node has
	// an unconfirmed write of that name itself.
	AssumeOverCache(r *tenurev1alpha1.IPReservation) bool
	// Confirm records the created object in place of the assumption.
	Confirm(r *tenurev1alpha1.IPReservation)
	// Forget drops an assumption whose Create failed.
	Forget(name string)
	// MarkUnsettled keeps r's name set aside for r's owner after a Create
	// whose outcome is unknown and could not be settled in time.
	MarkUnsettled(r *tenurev1alpha1.IPReservation)
	// Unsettled returns the reservation an unsettled Create of that name
	// was to make, if there is one.
	Unsettled(name string) (*tenurev1alpha1.IPReservation, bool)
	// MarkTakenElsewhere records a Create refused as AlreadyExists.
	MarkTakenElsewhere(name string)
	// Released records a delete of ours of the object of uid (empty: by
	// name, whatever held it).
	Released(name string, uid types.UID)
	// Cooling reports whether name was released within the cooldown by
	// another owner than o, and when (see store.Store.Cooling).
	Cooling(name string, o tenurev1alpha1.ReservationOwner) (releasedAt time.Time, cooling bool)
	// ReleasedSince reports whether this node released name at t or later
	// (a live list made at t still names it).
	ReleasedSince(name string, t time.Time) bool

	// Watching reports whether the window holds every reservation of that
	// block or of that whole scope (reservation.LabelBlock and
	// reservation.LabelNetwork values).
	Watching(block, scopeLabel string) bool
	// WatchedBlocks is how many blocks of the scope of that label the
	// window holds one by one (none once it holds the scope whole).
	WatchedBlocks(scopeLabel string) int
	// TakingInWhole reports whether a Watch of the whole scope of that
	// label is under way (it returns once the window holds the scope).
	// A Watch of a block of it then answers ErrTakingInWhole.
	TakingInWhole(scopeLabel string) bool
	// Watch makes the window hold one block of the scope of that label,
	// or the whole scope when block is "", and returns once it does.
	Watch(ctx context.Context, scopeLabel, block string) error
	// NextUnheldAddress is the first address at or after a that the window
	// holds no reservation of in the scope of that label; false when
	// all up to the end of a's family are held. The window indexes what it
	// holds as runs, so a search jumps over a taken run in one step
	// instead of probing each address.
	NextUnheldAddress(scopeLabel string, a netip.Addr) (netip.Addr, bool)
}
