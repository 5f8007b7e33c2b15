package allocator

import (
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/addrspace"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// InSpace reports whether a reservation name is of an item of space: of
// its kind, and inside it. The name's allocation scope is not compared: a
// space is the same in every scope.
func InSpace(space addrspace.Space, name string) bool {
	p, err := reservation.Parse(name)
	if err != nil || p.IsPrefix != (space.Kind() == tenurev1alpha1.KindDelegatedPrefix) {
		return false
	}
	return space.Contains(p.Prefix)
}
