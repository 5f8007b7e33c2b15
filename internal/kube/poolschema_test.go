package kube

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/openapi"
)

// recordedDoc is kube-apiserver v1.37.2's OpenAPI v3 document of
// ipam.tenure.dev/v1alpha1 serving deploy/crds, cut to the IPPool schemas.
const recordedDoc = "testdata/openapi-v3-ipam.tenure.dev-v1alpha1.json"

const poolKey = "dev.tenure.ipam.v1alpha1.IPPool"

// edited returns the recorded document after edit changed it as a map.
func edited(t *testing.T, edit func(schemas map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(recordedDoc)
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return raw
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc["components"].(map[string]any)["schemas"].(map[string]any))
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func poolSpec(schemas map[string]any) map[string]any {
	return schemas[poolKey].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
}

func dropSpecFields(fields ...string) func(map[string]any) {
	return func(schemas map[string]any) {
		props := poolSpec(schemas)["properties"].(map[string]any)
		for _, f := range fields {
			delete(props, f)
		}
	}
}

func TestMissingPoolSelectorsReadsTheIPPoolSchema(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(map[string]any)
		raw     string
		want    []string
		wantErr string
	}{
		{name: "this release's CRD has both selectors"},
		{name: "a CRD without nodeSelector", edit: dropSpecFields("nodeSelector"), want: []string{"spec.nodeSelector"}},
		{name: "a CRD from before the selectors", edit: dropSpecFields("namespaceSelector", "nodeSelector"),
			want: []string{"spec.namespaceSelector", "spec.nodeSelector"}},
		{name: "a spec that keeps unknown fields is not pruned", edit: func(s map[string]any) {
			dropSpecFields("namespaceSelector", "nodeSelector")(s)
			poolSpec(s)["x-kubernetes-preserve-unknown-fields"] = true
		}},
		{name: "a spec by reference is followed", edit: func(s map[string]any) {
			spec := poolSpec(s)
			delete(spec["properties"].(map[string]any), "nodeSelector")
			s["dev.tenure.ipam.v1alpha1.IPPoolSpec"] = spec
			s[poolKey].(map[string]any)["properties"].(map[string]any)["spec"] = map[string]any{
				"allOf": []any{map[string]any{"$ref": "#/components/schemas/dev.tenure.ipam.v1alpha1.IPPoolSpec"}}}
		}, want: []string{"spec.nodeSelector"}},
		{name: "a reference to a schema the document lacks", edit: func(s map[string]any) {
			s[poolKey].(map[string]any)["properties"].(map[string]any)["spec"] = map[string]any{"$ref": "#/components/schemas/nowhere"}
		}, wantErr: "refers to a schema it does not hold"},
		{name: "an IPPool without a spec", edit: func(s map[string]any) {
			delete(s[poolKey].(map[string]any)["properties"].(map[string]any), "spec")
		}, want: []string{"spec.namespaceSelector", "spec.nodeSelector"}},
		{name: "IPPool is known by its group-version-kind, not its key", edit: func(s map[string]any) {
			s["renamed"] = s[poolKey]
			delete(s, poolKey)
			dropSpecFields("nodeSelector")(map[string]any{poolKey: s["renamed"]})
		}, want: []string{"spec.nodeSelector"}},
		{name: "a document without IPPool", edit: func(s map[string]any) { delete(s, poolKey) }, wantErr: "has no IPPool schema"},
		{name: "not JSON", raw: "<html>", wantErr: "parsing the OpenAPI document of ipam.tenure.dev/v1alpha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.raw)
			if tc.raw == "" {
				doc = edited(t, tc.edit)
			}
			got, err := MissingPoolSelectors(doc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("missing %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStalePoolSchemaErrorNamesTheCRDTheFieldsAndTheFix(t *testing.T) {
	msg := (&StalePoolSchemaError{Missing: []string{"spec.namespaceSelector", "spec.nodeSelector"}}).Error()
	for _, want := range []string{"ippools.ipam.tenure.dev", "spec.namespaceSelector and spec.nodeSelector", "kubectl apply --server-side -f deploy/crds"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
}

// fakeOpenAPI serves one group-version document and counts reads.
type fakeOpenAPI struct {
	doc                []byte
	pathReads, schemas int
	err                error
}

func (f *fakeOpenAPI) PathsWithContext(context.Context) (map[string]openapi.GroupVersionWithContext, error) {
	f.pathReads++
	if f.err != nil {
		return nil, f.err
	}
	return map[string]openapi.GroupVersionWithContext{openAPIPath: fakeGV{f}}, nil
}

type fakeGV struct{ f *fakeOpenAPI }

func (g fakeGV) SchemaWithContext(_ context.Context, contentType string) ([]byte, error) {
	if contentType != "application/json" {
		return nil, errors.New("unexpected content type " + contentType)
	}
	g.f.schemas++
	return g.f.doc, nil
}

// ServerRelativeURL is the same for every document: the discovery's hash
// lags the document it names, and PoolSchema must not key on it.
func (g fakeGV) ServerRelativeURL() string { return "/openapi/v3/apis/ipam.tenure.dev/v1alpha1?hash=A" }

func TestPoolSchemaRereadsTheDocumentAfterItsTTL(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	f := &fakeOpenAPI{doc: edited(t, dropSpecFields("namespaceSelector", "nodeSelector"))}
	p := NewPoolSchema(f)
	p.Now = func() time.Time { return now }
	var se *StalePoolSchemaError
	if err := p.Check(ctx); !errors.As(err, &se) || len(se.Missing) != 2 {
		t.Fatalf("stale CRD: %v, want a StalePoolSchemaError naming both fields", err)
	}
	// The fix lands; within StalePoolSchemaTTL the verdict is the cached one.
	f.doc = edited(t, nil)
	now = now.Add(StalePoolSchemaTTL - time.Millisecond)
	if err := p.Check(ctx); !errors.As(err, &se) || f.pathReads != 1 || f.schemas != 1 {
		t.Fatalf("within the stale TTL: %v after %d discovery and %d document reads, want the cached verdict and one read of each", err, f.pathReads, f.schemas)
	}
	now = now.Add(time.Millisecond)
	if err := p.Check(ctx); err != nil || f.schemas != 2 {
		t.Fatalf("after the stale TTL: %v after %d document reads, want nil after 2", err, f.schemas)
	}
	// A good verdict holds for PoolSchemaTTL.
	f.doc = edited(t, dropSpecFields("nodeSelector"))
	now = now.Add(PoolSchemaTTL - time.Millisecond)
	if err := p.Check(ctx); err != nil || f.schemas != 2 {
		t.Fatalf("within the TTL: %v after %d document reads, want nil after 2", err, f.schemas)
	}
	now = now.Add(time.Millisecond)
	if err := p.Check(ctx); !errors.As(err, &se) || !slices.Equal(se.Missing, []string{"spec.nodeSelector"}) {
		t.Fatalf("after the TTL, a downgrade: %v, want spec.nodeSelector missing", err)
	}

	// A failed read is not cached: the next call asks again.
	f.err = errors.New("connection refused")
	now = now.Add(StalePoolSchemaTTL)
	if err := p.Check(ctx); err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("unreadable: %v, want the read's error", err)
	}
	f.err = nil
	f.doc = edited(t, nil)
	if err := p.Check(ctx); err != nil {
		t.Fatalf("readable again: %v, want nil", err)
	}
}
