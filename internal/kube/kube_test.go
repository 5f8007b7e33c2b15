package kube

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// The agent's and the controller's clients wait on no client-side limiter:
// the API server's priority and fairness bounds them.
func TestRESTConfigHasNoClientSideRateLimiter(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rl := cs.CoreV1().RESTClient().GetRateLimiter(); rl != nil {
		t.Errorf("client rate limiter %T (QPS %v), want none", rl, cfg.QPS)
	}
}
