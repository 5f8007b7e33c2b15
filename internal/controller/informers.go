package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
)

// reservationInformers are the reservations' informers, outside the
// manager's cache, which keeps one informer per type: reservations that
// carry the spec summary are watched as metadata, which travels as
// protobuf, where a whole custom resource travels as JSON, whose decoding
// would be most of the start-up's CPU (docs/performance.md, "The
// controller at 100,000 reservations and pods"); those made before the
// summary existed are watched whole. The label selects
// each set server-side, so every object is in exactly one of them.
func reservationInformers(c client.WithWatch) []toolscache.SharedIndexInformer {
	summarized, whole := summarySelectors()
	meta := kube.NewInformer(c, func() client.ObjectList { return reservation.NewMetadataList() }, &metav1.PartialObjectMetadata{}, resIndexers, summarized)
	old := kube.NewInformer(c, func() client.ObjectList { return &tenurev1alpha1.IPReservationList{} }, &tenurev1alpha1.IPReservation{},
		resIndexers, whole)
	for _, inf := range []toolscache.SharedIndexInformer{meta, old} {
		_ = inf.SetTransform(transformEntries)
	}
	return []toolscache.SharedIndexInformer{meta, old}
}

// summarySelectors select the reservations that carry the spec summary
// (reservation.LabelSpecSummary) and those that do not.
func summarySelectors() (summarized, whole client.MatchingLabelsSelector) {
	is, _ := labels.NewRequirement(reservation.LabelSpecSummary, selection.Equals, []string{reservation.SpecSummaryV1})
	not, _ := labels.NewRequirement(reservation.LabelSpecSummary, selection.NotEquals, []string{reservation.SpecSummaryV1})
	return client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*is)},
		client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*not)}
}

// runReservationInformers runs the reservation informers on every replica
// and marks the controller ready once they and the manager's cache have
// synced.
func (c *Controller) runReservationInformers(ctx context.Context) error {
	synced := make([]toolscache.InformerSynced, len(c.reservations))
	for i, inf := range c.reservations {
		go inf.RunWithContext(ctx)
		synced[i] = inf.HasSynced
	}
	if !c.cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	c.synced.Store(true)
	close(c.syncedCh)
	c.log.Info("caches synced")
	<-ctx.Done()
	return nil
}

// everyReplica is a manager runnable that runs whether or not the replica
// leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

func (everyReplica) NeedLeaderElection() bool { return false }
