package testbed

import (
	"fmt"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		if strings.Contains(msg, "cannot ") && strings.Contains(msg, "system:serviceaccount:") {
			return "rbac"
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
