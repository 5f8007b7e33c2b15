package ops

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table writes columns as kubectl get does: upper-case headers, cells
// padded with three spaces, the wide columns (-o wide) last.
type table struct {
	tw   *tabwriter.Writer
	wide bool
}

// newTable writes the header: cols, then wideCols when wide.
func newTable(w io.Writer, wide bool, cols []string, wideCols ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0), wide: wide}
	t.row(cols, wideCols...)
	return t
}

// row writes one line; wideCells only when the table is wide.
func (t *table) row(cells []string, wideCells ...string) {
	if t.wide {
		cells = append(cells[:len(cells):len(cells)], wideCells...)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// writeNotes writes what could not be read before a table.
func writeNotes(w io.Writer, notes []string) error {
	for _, n := range notes {
		if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// orNone is kubectl's way of printing an empty cell.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
