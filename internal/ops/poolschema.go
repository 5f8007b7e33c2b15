package ops

import (
	"context"
	"slices"
	"strings"

	"github.com/tenure-ipam/tenure/internal/inventory"
	"github.com/tenure-ipam/tenure/internal/kube"
)

// RuleIPPoolSchemaStale: a pools list names an IPPool while the cluster's
// IPPool CRD lacks the selector fields (a CRD older than tenure, which
// `helm upgrade` leaves in place). The API server prunes the selectors
// from every IPPool written, so the agents refuse the list (code 7).
const RuleIPPoolSchemaStale = Rule("IPPoolSchemaStale")

// FindStalePoolSchema reports each IPPool a pools list names when the
// IPPool CRD lacks the fields missing (kube.MissingPoolSelectors): none
// when nothing is missing.
func FindStalePoolSchema(inv *inventory.Inventory, missing []string) []Finding {
	if len(missing) == 0 {
		return nil
	}
	stale := (&kube.StalePoolSchemaError{Missing: missing}).Error()
	var out []Finding
	for pool, sources := range inv.Listed {
		out = append(out, Finding{
			Rule:    RuleIPPoolSchemaStale,
			Object:  "IPPool " + pool,
			Message: "listed by the pools list of " + strings.Join(sources, ", ") + ", which agents refuse: " + stale,
			Related: slices.Sorted(slices.Values(sources)),
		})
	}
	return out
}

// poolSchemaMissing reads which selector fields the IPPool CRD lacks; note
// says why it could not tell.
func (c *Client) poolSchemaMissing(ctx context.Context) (missing []string, note string) {
	if c.OpenAPI == nil {
		return nil, "the IPPool CRD's schema was not checked: no OpenAPI client"
	}
	missing, err := kube.ReadPoolSchema(ctx, c.OpenAPI)
	if err != nil {
		return nil, "the IPPool CRD's schema was not checked: " + err.Error()
	}
	return missing, ""
}

// poolSchemaNote is what `tenurectl pools` says of an IPPool CRD that
// lacks the selector fields: its selectors show what the API server kept.
func poolSchemaNote(missing []string) string {
	return (&kube.StalePoolSchemaError{Missing: missing}).Error() + "; the SELECTS column shows what the API server kept"
}
