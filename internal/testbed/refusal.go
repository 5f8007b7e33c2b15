package testbed

import (
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
