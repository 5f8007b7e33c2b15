//go:build integration

package cptest_test

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tenure-ipam/tenure/internal/controlplane/cptest"
)

func TestMain(m *testing.M) {
	os.Exit(cptest.Main(m, nil))
}

// The CRDs are installed and their resources answer right away.
func TestCRDsInstalled(t *testing.T) {
	dyn, err := dynamic.NewForConfig(cptest.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "ipam.tenure.dev", Version: "v1alpha1", Resource: "ipreservations"},
		{Group: "ipam.tenure.dev", Version: "v1alpha1", Resource: "ippools"},
		{Group: "k8s.cni.cncf.io", Version: "v1alpha1", Resource: "ipamclaims"},
	} {
		if _, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Errorf("list %s: %v", gvr, err)
		}
	}
	if cptest.Current().Config.QPS >= 0 {
		t.Error("rate limiting is on")
	}
}
