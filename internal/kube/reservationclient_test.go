package kube

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
)

// A create sends the options it is given as query parameters, and none
// when it is given none.
func TestCreateSendsItsOptionsAsParameters(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := WithJSON(nil, &rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]client.CreateOption{nil, {client.DryRunAll}, {client.FieldOwner("tenure")}} {
		r := &tenurev1alpha1.IPReservation{}
		r.Name = "n.10.0.0.1"
		if err := c.Create(context.Background(), r, opts...); err != nil {
			t.Fatalf("create with %v: %v", opts, err)
		}
	}
	want := []string{"", "dryRun=All", "fieldManager=tenure"}
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != len(want) {
		t.Fatalf("queries %q, want %q", queries, want)
	}
	for i := range want {
		if queries[i] != want[i] {
			t.Errorf("create %d: query %q, want %q", i, queries[i], want[i])
		}
	}
}
