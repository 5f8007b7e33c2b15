//go:build integration

package allocator_test

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

func TestMain(m *testing.M) { os.Exit(cptest.Main(m, nil)) }

// testClient talks to the test binary's kube-apiserver.
func testClient(t *testing.T) client.WithWatch {
	t.Helper()
	c, err := kube.NewClient(cptest.Current().Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
