package testbed

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

var ruleRe = regexp.MustCompile(`\[([a-z0-9-]+)\]`)

// RefusalRule names what refused an agent's write: the rule in brackets of
// the node-restriction policy or webhook, "rbac" for the authorizer, ""
// when err is nil, and "error: ..." for anything else.
func RefusalRule(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		if strings.Contains(msg, AgentPolicyName) || strings.Contains(msg, AgentWebhookName) {
			if m := ruleRe.FindStringSubmatch(msg); m != nil {
				return m[1]
			}
		}
		if strings.Contains(msg, "cannot ") && (strings.Contains(msg, "system:serviceaccount:") || strings.Contains(msg, "system:node:")) {
			return "rbac"
		}
		// The NodeRestriction admission plugin's refusals of a kubelet.
		if strings.Contains(msg, "is not allowed to modify") || strings.Contains(msg, "NodeRestriction") {
			return "NodeRestriction"
		}
	}
	return "error: " + msg
}

// MatrixHeader is the header of an attack-matrix table; who names the
// node whose objects a row targets unless it says otherwise.
func MatrixHeader(who string) string {
	return "| # | target (" + who + ") | resource | verb | attempt | want | got |\n|---|---|---|---|---|---|---|\n"
}

// MatrixRow is row n of an attack-matrix table: want is the rule that must
// refuse the write ("" for a write that must be allowed), got what
// RefusalRule read off its answer. ok is false when they differ.
func MatrixRow(n int, target, resource, verb, what, want, got string) (line string, ok bool) {
	wantCell, gotCell := want, got
	if wantCell == "" {
		wantCell = "allowed"
	}
	if gotCell == "" {
		gotCell = "allowed"
	}
	mark := ""
	if got != want {
		mark = " **FAIL**"
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s%s |\n", n, target, resource, verb, what, wantCell, gotCell, mark), got == want
}

// Attempt is one row of an attack matrix: a write an agent tries, and the
// rule that must refuse it ("" for a write that must be allowed).
type Attempt struct {
	Target, Resource, Verb, What string
	Do                           func() error
	Rule                         string
}

// RunMatrix makes every attempt in order, fails t for each whose answer
// is not its Rule, and returns the table; who is as in MatrixHeader.
func RunMatrix(t testing.TB, who string, attempts []Attempt) string {
	t.Helper()
	var table strings.Builder
	table.WriteString(MatrixHeader(who))
	for i, a := range attempts {
		line, ok := MatrixRow(i+1, a.Target, a.Resource, a.Verb, a.What, a.Rule, RefusalRule(a.Do()))
		if !ok {
			t.Errorf("row %d: %s", i+1, strings.TrimSpace(line))
		}
		table.WriteString(line)
	}
	return table.String()
}

// PodOwner is the owner an agent on node writes for pod p's net1.
func PodOwner(p *corev1.Pod, node string) tenurev1alpha1.ReservationOwner {
	return tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		PodName: p.Name, PodUID: string(p.UID), ContainerID: "sandbox-" + string(p.UID), Interface: "net1", Node: node}
}

// Try is an Attempt, in the order a matrix row reads.
func Try(target, resource, verb, what string, do func() error, rule string) Attempt {
	return Attempt{Target: target, Resource: resource, Verb: verb, What: what, Do: do, Rule: rule}
}

// PresentClaim is the write that would hand a claim to pod: its
// status.ownerPod pointed at pod, on the claim read fresh. A 409 Conflict
// (another writer, the controller's condition, came in between) is no
// verdict: the write is sent again on a fresh read, as an attacker would.
func PresentClaim(ctx context.Context, c client.Client, key client.ObjectKey, pod string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claim := &ipamclaimsv1alpha1.IPAMClaim{}
		if err := c.Get(ctx, key, claim); err != nil {
			return err
		}
		claim.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: pod}
		return c.Status().Update(ctx, claim)
	})
}
