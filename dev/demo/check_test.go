package demo

import (
	"fmt"
	"strings"
	"testing"
)

func TestSANProblems(t *testing.T) {
	good := func() *Report {
		r := &Report{ExhaustionError: "range 192.168.100.0/29 is full: all 6 assignable addresses are reserved"}
		for i := 1; i <= 6; i++ {
			r.SAN = append(r.SAN, Allocation{Pod: fmt.Sprintf("san-%d", i), Node: "node-a", Address: fmt.Sprintf("192.168.100.%d/29", i)})
		}
		return r
	}
	printed := func(r *Report) string {
		var b strings.Builder
		for _, a := range r.SAN {
			fmt.Fprintf(&b, "%s %s %s\n", a.Pod, a.Node, a.Address)
		}
		return b.String() + r.ExhaustionError + "\n"
	}
	tests := []struct {
		name   string
		change func(r *Report) (printed string)
		want   string // part of the one problem expected; "" for none
	}{
		{"the truth", func(r *Report) string { return printed(r) }, ""},
		{"network address handed out", func(r *Report) string {
			r.SAN[0].Address = "192.168.100.0/29"
			return printed(r)
		}, "outside the usable"},
		{"broadcast address handed out", func(r *Report) string {
			r.SAN[5].Address = "192.168.100.7/29"
			return printed(r)
		}, "outside the usable"},
		{"one address twice", func(r *Report) string {
			r.SAN[1].Address = r.SAN[0].Address
			return printed(r)
		}, "duplicate"},
		{"an allocation not shown", func(r *Report) string {
			return strings.Replace(printed(r), "san-3", "san-x", 1)
		}, "does not show"},
		{"five pods only", func(r *Report) string {
			r.SAN = r.SAN[:5]
			return printed(r)
		}, "5 pods got SAN addresses, want 6"},
		{"error not naming the full range", func(r *Report) string {
			r.ExhaustionError = "try again"
			return printed(r)
		}, "exhaustion error"},
		{"error not shown", func(r *Report) string {
			return strings.Replace(printed(r), "is full", "", 1)
		}, "exhaustion error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			got := r.SANProblems(tt.change(r))
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("problems %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("problems %q, want one saying %q", got, tt.want)
			}
		})
	}
}
