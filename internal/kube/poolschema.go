package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/openapi"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// PoolSelectorFields are the IPPool spec fields a pools list chooses by.
var PoolSelectorFields = []string{"namespaceSelector", "nodeSelector"}

// PoolSchemaFix is what an operator runs to install this release's CRDs.
const PoolSchemaFix = "kubectl apply --server-side -f deploy/crds"

// StalePoolSchemaError says the cluster's IPPool CRD lacks selector fields:
// the API server prunes them from every IPPool written, so every pool
// selects everything and a pools list cannot tell the pools apart.
type StalePoolSchemaError struct {
	// Missing are the fields, as "spec.nodeSelector".
	Missing []string
}

func (e *StalePoolSchemaError) Error() string {
	them := "them"
	if len(e.Missing) == 1 {
		them = "it"
	}
	return fmt.Sprintf("the cluster's IPPool CRD (ippools.%s) lacks %s, so the API server drops %s from every IPPool and a pools list cannot choose by %s; install this release's CRDs: %s",
		tenurev1alpha1.GroupVersion.Group, strings.Join(e.Missing, " and "), them, them, PoolSchemaFix)
}

// openAPIPath is the key of tenure's group-version in the API server's
// OpenAPI v3 discovery document (/openapi/v3).
var openAPIPath = "apis/" + tenurev1alpha1.GroupVersion.String()

// MissingPoolSelectors returns the selector fields (PoolSelectorFields, as
// "spec.FIELD") that IPPool's schema in doc lacks. doc is the API server's
// OpenAPI v3 document of ipam.tenure.dev/v1alpha1 as JSON; a document
// without an IPPool schema is an error. A spec that keeps unknown fields
// (x-kubernetes-preserve-unknown-fields) is not pruned: nothing is missing.
func MissingPoolSelectors(doc []byte) ([]string, error) {
	var d spec3.OpenAPI
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document of %s: %w", tenurev1alpha1.GroupVersion, err)
	}
	if d.Components == nil {
		return nil, fmt.Errorf("the OpenAPI document of %s has no schemas", tenurev1alpha1.GroupVersion)
	}
	var pool *spec.Schema
	for _, s := range d.Components.Schemas {
		if s != nil && isIPPool(s) {
			pool = s
			break
		}
	}
	if pool == nil {
		return nil, fmt.Errorf("the OpenAPI document of %s has no IPPool schema", tenurev1alpha1.GroupVersion)
	}
	ps, ok := pool.Properties["spec"]
	if !ok {
		return prefixed(PoolSelectorFields), nil
	}
	specSchema := resolve(&ps, d.Components.Schemas)
	if specSchema == nil {
		return nil, fmt.Errorf("the OpenAPI document of %s: IPPool's spec refers to a schema it does not hold", tenurev1alpha1.GroupVersion)
	}
	if keep, _ := specSchema.Extensions["x-kubernetes-preserve-unknown-fields"].(bool); keep {
		return nil, nil
	}
	var missing []string
	for _, f := range PoolSelectorFields {
		if _, ok := specSchema.Properties[f]; !ok {
			missing = append(missing, "spec."+f)
		}
	}
	return missing, nil
}

func prefixed(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = "spec." + f
	}
	return out
}

// isIPPool reports whether s is the schema of IPPool of tenure's
// group-version, by its x-kubernetes-group-version-kind.
func isIPPool(s *spec.Schema) bool {
	gvks, _ := s.Extensions["x-kubernetes-group-version-kind"].([]any)
	for _, g := range gvks {
		m, _ := g.(map[string]any)
		if m["group"] == tenurev1alpha1.GroupVersion.Group && m["version"] == tenurev1alpha1.GroupVersion.Version && m["kind"] == "IPPool" {
			return true
		}
	}
	return false
}

// resolve follows a $ref, or an allOf of one $ref, into schemas.
func resolve(s *spec.Schema, schemas map[string]*spec.Schema) *spec.Schema {
	ref := s.Ref.String()
	if ref == "" && len(s.AllOf) == 1 && len(s.Properties) == 0 {
		ref = s.AllOf[0].Ref.String()
	}
	if ref == "" {
		return s
	}
	return schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
}

// ReadPoolSchema reads the API server's OpenAPI v3 document of
// ipam.tenure.dev/v1alpha1 (found through the discovery document,
// /openapi/v3) and returns the selector fields IPPool's schema lacks.
func ReadPoolSchema(ctx context.Context, c openapi.ClientWithContext) (missing []string, err error) {
	paths, err := c.PathsWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's OpenAPI v3 discovery: %w", err)
	}
	gv, ok := paths[openAPIPath]
	if !ok {
		return nil, fmt.Errorf("the API server publishes no OpenAPI v3 document for %s (is the IPPool CRD installed?)", tenurev1alpha1.GroupVersion)
	}
	doc, err := gv.SchemaWithContext(ctx, "application/json")
	if err != nil {
		return nil, fmt.Errorf("reading the OpenAPI v3 document of %s: %w", tenurev1alpha1.GroupVersion, err)
	}
	return MissingPoolSelectors(doc)
}

// PoolSchemaTTL is how long PoolSchema trusts a schema with both selector
// fields before it asks again: an IPPool CRD replaced by an older one is
// an operator's act (a downgrade), rare and not urgent to the second, and
// two reads a minute (the discovery document and the group-version's, some
// 200 kB of JSON with the meta/v1 schemas), only by agents that serve a
// pools list, cost the API server little. StalePoolSchemaTTL is the same for a schema that lacks them:
// while it does, ADDs with a pools list fail, and the fix
// (PoolSchemaFix) takes effect within seconds.
const (
	PoolSchemaTTL      = time.Minute
	StalePoolSchemaTTL = 5 * time.Second
)

// PoolSchema is the cached answer to "does the cluster's IPPool CRD have
// the selector fields", read from the API server's OpenAPI v3 document,
// which every authenticated identity may read (system:discovery). After
// its TTL it reads the document again. The hash in the discovery
// document's URL is no key for the answer: kube-apiserver v1.37 serves a
// changed CRD's document seconds before the discovery's hash follows, so a
// document read under one hash may be another's. Safe for concurrent use;
// callers wait for one read in flight.
type PoolSchema struct {
	client openapi.ClientWithContext
	// Now is the clock (tests set it).
	Now func() time.Time

	mu      sync.Mutex
	verdict error
	until   time.Time
}

// NewPoolSchema returns a PoolSchema reading through c.
func NewPoolSchema(c openapi.ClientWithContext) *PoolSchema {
	return &PoolSchema{client: c, Now: time.Now}
}

// Check returns nil when the IPPool CRD has both selector fields, a
// *StalePoolSchemaError when it lacks any, and another error when the
// schema could not be read (not cached).
func (p *PoolSchema) Check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Now().Before(p.until) {
		return p.verdict
	}
	missing, err := ReadPoolSchema(ctx, p.client)
	if err != nil {
		return err
	}
	p.verdict = nil
	if len(missing) > 0 {
		p.verdict = &StalePoolSchemaError{Missing: missing}
	}
	ttl := PoolSchemaTTL
	if p.verdict != nil {
		ttl = StalePoolSchemaTTL
	}
	p.until = p.Now().Add(ttl)
	return p.verdict
}
