package agent

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// statusVerb answers STATUS: the agent is ready once its caches synced
// and the API server answers.
type statusVerb struct {
	client client.Reader
	// ready is Agent.Ready.
	ready func() bool
}

func (sv *statusVerb) run(ctx context.Context) error {
	if !sv.ready() {
		return codedf(CodePluginNotAvailable, nil, "tenure agent caches are not synced yet")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sv.client.List(ctx, &tenurev1alpha1.IPPoolList{}, limitOne); err != nil {
		return codedf(CodePluginNotAvailable, err, "Kubernetes API not reachable")
	}
	return nil
}

var limitOne = client.Limit(1)
