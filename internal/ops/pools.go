package ops

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// SourceReservations is the source of a row that no configuration
// describes: only reservations name its network and range.
const SourceReservations = "reservations"

// PoolRow is the usage of one range (or prefix-delegation pool) of one
// allocation scope.
type PoolRow struct {
	// Network is the allocation scope (spec.network of its reservations).
	Network string                         `json:"network"`
	Kind    tenurev1alpha1.ReservationKind `json:"kind"`
	// Range as reservations record it: "10.0.0.0/24",
	// "10.0.0.10-10.0.0.20/24", "2001:db8:100::/40 as /56".
	Range string `json:"range"`
	Pool  string `json:"pool,omitempty"`
	// Selectors are the pool's, for a pools list's choice; zero for a
	// range of no pool and for a pool that selects everything.
	Selectors inventory.PoolSelectors `json:"selectors,omitzero"`
	// Sources name the IPPools and NetworkAttachmentDefinitions that
	// configure the range, or "reservations" when none does; then the
	// capacity is the range's without its excludes, which reservations do
	// not record.
	Sources []string `json:"sources"`
	// Capacity is the number of assignable addresses (prefixes), 0 when
	// the range is not known; it saturates at 2^64-1.
	Capacity  uint64 `json:"capacity"`
	Allocated uint64 `json:"allocated"`
	Free      uint64 `json:"free"`
	// SetAside counts the allocated addresses an administrator set aside,
	// with their reasons (each once, in address order).
	SetAside        uint64   `json:"setAside,omitempty"`
	SetAsideReasons []string `json:"setAsideReasons,omitempty"`
}

// PoolsReport is Pools' answer.
type PoolsReport struct {
	Rows  []PoolRow `json:"networks"`
	Notes []string  `json:"notes,omitempty"`
}

// Pools reports every known range with its usage: the ranges of declared
// IPPools and of the tenure configurations in NetworkAttachmentDefinitions,
// and every (network, range) that reservations name.
func (c *Client) Pools(ctx context.Context) (*PoolsReport, error) {
	inv, err := c.inventory(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := c.reservations(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rep := &PoolsReport{Rows: PoolRows(inv, rs), Notes: inv.Notes}
	if inv.Pools > 0 && c.OpenAPI != nil {
		if missing, note := c.poolSchemaMissing(ctx); note != "" {
			rep.Notes = append(rep.Notes, note)
		} else if len(missing) > 0 {
			rep.Notes = append(rep.Notes, poolSchemaNote(missing))
		}
	}
	return rep, nil
}

// PoolRows counts the reservations of each known space, and of each
// (network, kind, range) they name that no known space is.
func PoolRows(inv *inventory.Inventory, rs []*tenurev1alpha1.IPReservation) []PoolRow {
	type rowKey struct {
		scope string
		kind  tenurev1alpha1.ReservationKind
		rng   string
	}
	rows := map[rowKey]*PoolRow{}
	for _, s := range inv.Spaces() {
		rows[rowKey{s.Scope, s.Space.Kind(), s.Space.String()}] = &PoolRow{
			Network: s.Scope, Kind: s.Space.Kind(), Range: s.Space.String(), Pool: s.Pool,
			Sources: slices.Clone(s.Sources), Capacity: s.Space.Capacity(),
		}
	}
	for _, r := range rs {
		k := rowKey{r.Spec.Network, r.Spec.Kind, r.Spec.Range}
		row := rows[k]
		if row == nil {
			row = &PoolRow{Network: r.Spec.Network, Kind: r.Spec.Kind, Range: r.Spec.Range, Pool: r.Spec.Pool, Sources: []string{SourceReservations}}
			if sp := inventory.SpaceOfRange(r.Spec.Kind, r.Spec.Range); sp != nil {
				row.Capacity = sp.Capacity()
			}
			rows[k] = row
		}
		row.Allocated++
		if r.Spec.Owner.Kind == tenurev1alpha1.OwnerAdministrator {
			row.SetAside++
			if reason := r.Annotations[reservation.AnnotationReason]; !slices.Contains(row.SetAsideReasons, reason) {
				row.SetAsideReasons = append(row.SetAsideReasons, reason)
			}
		}
	}
	out := make([]PoolRow, 0, len(rows))
	for _, row := range rows {
		row.Selectors = inv.Selectors[row.Pool]
		if row.Capacity > row.Allocated {
			row.Free = row.Capacity - row.Allocated
		}
		out = append(out, *row)
	}
	slices.SortFunc(out, func(a, b PoolRow) int {
		return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Range, b.Range))
	})
	return out
}

// WriteTable writes one row per range with a usage bar; wide adds the
// kind, the pool and what its selectors select, and the sources.
func (p *PoolsReport) WriteTable(w io.Writer, wide bool) error {
	if err := writeNotes(w, p.Notes); err != nil {
		return err
	}
	if len(p.Rows) == 0 {
		_, err := fmt.Fprintln(w, "No pools or reservations found.")
		return err
	}
	t := newTable(w, wide, []string{"NETWORK", "RANGE", "CAPACITY", "ALLOCATED", "FREE", "USAGE"}, "KIND", "POOL", "SELECTS", "SET ASIDE", "SOURCES")
	for _, r := range p.Rows {
		selects := "<none>"
		if r.Pool != "" {
			selects = r.Selectors.Describe()
		}
		t.row([]string{r.Network, orNone(r.Range), count(r.Capacity), strconv.FormatUint(r.Allocated, 10), count(r.Free), UsageBar(r.Allocated, r.Capacity, 20)},
			string(r.Kind), orNone(r.Pool), selects, setAsideCell(r), strings.Join(r.Sources, ","))
	}
	return t.flush()
}

// setAsideCell is how many of a row's addresses are set aside, and why:
// "2 (router; storage head)".
func setAsideCell(r PoolRow) string {
	if r.SetAside == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", r.SetAside, strings.Join(r.SetAsideReasons, "; "))
}

// count prints a capacity; a saturated one is 2^64 or more.
func count(n uint64) string {
	if n == math.MaxUint64 {
		return ">=2^64"
	}
	return strconv.FormatUint(n, 10)
}

// UsageBar draws allocated out of capacity in width cells and a
// percentage: "[#####...............]  25%". An unknown capacity (0) draws
// no bar.
func UsageBar(allocated, capacity uint64, width int) string {
	if capacity == 0 {
		return "-"
	}
	frac := float64(allocated) / float64(capacity)
	filled := int(math.Round(frac * float64(width)))
	if allocated > 0 && filled == 0 {
		filled = 1 // something is used: show it
	}
	filled = min(filled, width)
	pct := frac * 100
	if allocated > 0 && pct < 1 {
		return fmt.Sprintf("[%s%s]  <1%%", strings.Repeat("#", filled), strings.Repeat(".", width-filled))
	}
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("#", filled), strings.Repeat(".", width-filled), pct)
}
