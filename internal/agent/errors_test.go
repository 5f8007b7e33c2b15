package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestREADMEListsEveryCode: README.md's table of CNI error codes has a row
// for each code errors.go names, and none for a code it does not.
func TestREADMEListsEveryCode(t *testing.T) {
	codes := map[string]uint{
		"CodeIncompatibleCNIVersion":      CodeIncompatibleCNIVersion,
		"CodeInvalidEnvironmentVariables": CodeInvalidEnvironmentVariables,
		"CodeIOFailure":                   CodeIOFailure,
		"CodeDecodingFailure":             CodeDecodingFailure,
		"CodeInvalidNetworkConfig":        CodeInvalidNetworkConfig,
		"CodeInvalidNetNS":                CodeInvalidNetNS,
		"CodeTryAgainLater":               CodeTryAgainLater,
		"CodePluginNotAvailable":          CodePluginNotAvailable,
		"CodeRangeFull":                   CodeRangeFull,
		"CodeAddressConflict":             CodeAddressConflict,
		"CodeClaimMismatch":               CodeClaimMismatch,
		"CodeNotPresented":                CodeNotPresented,
		"CodeCheckFailed":                 CodeCheckFailed,
		"CodeStaticPod":                   CodeStaticPod,
	}
	// The map above holds every Code constant of errors.go.
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if strings.HasPrefix(n.Name, "Code") {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	if got, want := slices.Sorted(slices.Values(declared)), slices.Sorted(maps.Keys(codes)); !slices.Equal(got, want) {
		t.Fatalf("errors.go declares %v, the test knows %v", got, want)
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "### CNI error codes\n")
	if !ok {
		t.Fatal(`README.md has no "### CNI error codes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[uint]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(section, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 32)
		rows[uint(n)] = true
	}
	want := map[uint]bool{}
	for name, c := range codes {
		want[c] = true
		if !rows[c] {
			t.Errorf("README.md lists no code %d (%s)", c, name)
		}
	}
	for c := range rows {
		if !want[c] {
			t.Errorf("README.md lists code %d, which errors.go does not name", c)
		}
	}
}
