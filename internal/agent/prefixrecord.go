package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/claims"
)

// CRDFix is what the condition, the Event and tenurectl check tell an
// administrator to do when the IPAMClaim CRD drops status.delegatedPrefixes.
const CRDFix = "install tenure's IPAMClaim CRD over it: kubectl apply -f deploy/crds/k8s.cni.cncf.io_ipamclaims.yaml"

// checkPrefixRecord finds out whether the status write just made kept the
// delegated prefixes it sent, and says so once per claim when it did not
// (prefixRecordPruned), or that it does again (a CRD with the field was
// installed since). The API server's warning on the write names a pruned
// field; without one (an API server that does not send them), the claim is
// read back when the write added prefixes the claim did not have.
func (s *statusRecorder) checkPrefixRecord(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, sent, before []string, w *apiWarnings) {
	if len(sent) == 0 {
		return
	}
	why := w.about("delegatedPrefixes")
	if why == "" {
		if containsAll(before, sent) {
			return // nothing new written: the write says nothing of the field
		}
		got := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := s.client.Get(ctx, k8stypes.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, got); err != nil || got.UID != claim.UID {
			return
		}
		if containsAll(got.Status.DelegatedPrefixes, sent) {
			s.prefixRecordRestored(ctx, claim)
			return
		}
		why = "the claim read back after the write has no status.delegatedPrefixes"
	}
	s.prefixRecordPruned(ctx, claim, sent, why)
}

func (s *statusRecorder) prefixRecordPruned(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, sent []string, why string) {
	if c := meta.FindStatusCondition(claim.Status.Conditions, ipamclaimsv1alpha1.ConditionDelegatedPrefixesRecorded); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == ipamclaimsv1alpha1.ReasonFieldPrunedByCRD {
		return // said once already
	}
	msg := fmt.Sprintf("the API server dropped status.delegatedPrefixes %s (%s): the installed CustomResourceDefinition ipamclaims.k8s.cni.cncf.io "+
		"has no such field, as the upstream k8snetworkplumbingwg/ipamclaims one has not. The prefix stays reserved for the claim, "+
		"and DHCPv6 and the prefix route serve it from its IPReservation; only the record is lost. To record it, %s",
		strings.Join(sent, ", "), why, CRDFix)
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: ipamclaimsv1alpha1.ConditionDelegatedPrefixesRecorded, Status: metav1.ConditionFalse,
		Reason: ipamclaimsv1alpha1.ReasonFieldPrunedByCRD, Message: msg, ObservedGeneration: claim.Generation,
	})
	if claim.Status.IPs == nil {
		claim.Status.IPs = []string{} // required by the upstream schema
	}
	// A conflict means another ADD of the claim wrote it: its own check
	// says it, or the next ADD's.
	if err := s.client.Status().Update(ctx, claim); err != nil {
		s.log.Info("could not record the claim's DelegatedPrefixesRecorded condition", "claim", claims.Key(claim), "err", err)
		return
	}
	if s.recorder != nil {
		s.recorder.Event(claim, corev1.EventTypeWarning, ipamclaimsv1alpha1.ReasonFieldPrunedByCRD, msg)
	}
	s.log.Warn("claim's delegated prefix not recorded: the IPAMClaim CRD has no status.delegatedPrefixes",
		"claim", claims.Key(claim), "prefixes", sent, "why", why, "fix", CRDFix)
	s.pruned.Inc()
}

// prefixRecordRestored turns a FieldPrunedByCRD condition True once the
// prefix is recorded again.
func (s *statusRecorder) prefixRecordRestored(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) {
	c := meta.FindStatusCondition(claim.Status.Conditions, ipamclaimsv1alpha1.ConditionDelegatedPrefixesRecorded)
	if c == nil || c.Status == metav1.ConditionTrue {
		return
	}
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: ipamclaimsv1alpha1.ConditionDelegatedPrefixesRecorded, Status: metav1.ConditionTrue,
		Reason: ipamclaimsv1alpha1.ReasonDelegatedPrefixesRecorded, Message: "status.delegatedPrefixes records the claim's delegated prefix",
		ObservedGeneration: claim.Generation,
	})
	if err := s.client.Status().Update(ctx, claim); err != nil {
		s.log.Info("could not record the claim's DelegatedPrefixesRecorded condition", "claim", claims.Key(claim), "err", err)
		return
	}
	s.log.Info("claim's delegated prefix recorded again", "claim", claims.Key(claim))
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// apiWarnings collects the API server's warnings of the requests made with
// a context from collectWarnings.
type apiWarnings struct {
	mu    sync.Mutex
	texts []string
}

type warningsKey struct{}

func collectWarnings(ctx context.Context) (context.Context, *apiWarnings) {
	w := &apiWarnings{}
	return context.WithValue(ctx, warningsKey{}, w), w
}

// about returns the first warning that mentions s, "" if none does.
func (w *apiWarnings) about(s string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.texts {
		if strings.Contains(t, s) {
			return t
		}
	}
	return ""
}

// warningHandler is the agent's rest.WarningHandlerWithContext: a warning
// of a request whose context collects them goes to its collector (the
// caller acts on it); every other is logged, once per text.
type warningHandler struct {
	log *slog.Logger

	mu     sync.Mutex
	logged map[string]bool
}

// maxLoggedWarnings bounds the texts remembered to log each once.
const maxLoggedWarnings = 256

func (h *warningHandler) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	if w, ok := ctx.Value(warningsKey{}).(*apiWarnings); ok {
		w.mu.Lock()
		w.texts = append(w.texts, text)
		w.mu.Unlock()
		if strings.Contains(text, "delegatedPrefixes") {
			return // checkPrefixRecord reports it, once per claim
		}
	}
	h.mu.Lock()
	seen := h.logged[text]
	if !seen && len(h.logged) < maxLoggedWarnings {
		h.logged[text] = true
	}
	h.mu.Unlock()
	if !seen {
		h.log.Warn("API server warning", "warning", text)
	}
}
