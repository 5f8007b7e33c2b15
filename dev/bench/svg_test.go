package bench

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlotSVGIsWellFormed(t *testing.T) {
	p := Plot{
		Title:  "ADD latency <500 ADDs & friends>",
		XLabel: "concurrency",
		YLabel: "ms",
		Series: []Series{
			{Label: "p50, 1 node", Color: "#1f77b4", Points: []Point{{10, 12.5}, {25, 30}, {50, 61}}},
			{Label: "p99, 4 nodes", Color: "#d62728", Dashed: "6 3", Points: []Point{{50, 240}, {10, 40}, {25, 90}}},
		},
		HLines: []HLine{{Y: 250, Label: "target"}},
		Note:   `tenurectl bench -o table "quoted"`,
	}
	data := p.SVG()
	dir := t.TempDir()
	path := filepath.Join(dir, "plot.svg")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(read)))
	counts := map[string]int{}
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, read)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root namespace %q", se.Name.Space)
				}
			}
			counts[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	if counts["polyline"] != 2 || counts["circle"] != 6 {
		t.Fatalf("elements %v: want 2 polylines and 6 points", counts)
	}
	if !strings.Contains(string(read), "&lt;500 ADDs &amp; friends&gt;") {
		t.Fatal("title not escaped")
	}
}

func TestPlotWithoutDataStillRenders(t *testing.T) {
	data := Plot{Title: "empty"}.SVG()
	if err := xml.Unmarshal(data, new(struct {
		XMLName xml.Name `xml:"svg"`
	})); err != nil {
		t.Fatal(err)
	}
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 12: 20, 48: 50, 0: 1} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}
