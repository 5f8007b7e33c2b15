//go:build !integration

package allocator_test

import (
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenure-ipam/tenure/test/kubefake"
)

var fakes sync.Map // *testing.T -> *kubefake.Client

// testClient is an in-memory API, one per test, shared by every factory of
// that test as the real API server is: the unit build runs the allocator's
// tests on it; the integration build runs the same tests on a real API
// server (client_apiserver_test.go).
func testClient(t *testing.T) client.WithWatch {
	t.Helper()
	c, loaded := fakes.LoadOrStore(t, kubefake.New())
	if !loaded {
		t.Cleanup(func() { fakes.Delete(t) })
	}
	return c.(*kubefake.Client)
}
