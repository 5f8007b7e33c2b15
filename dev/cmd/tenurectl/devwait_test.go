package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-ipam/tenure/test/progress"
)

// TestDevUpGivesUpNamingTheWaitAndItsLastState: once the deadline of dev
// up's context passes, the error it returns names the wait it was in and
// the state that wait last saw, and wraps the wait's own error.
func TestDevUpGivesUpNamingTheWaitAndItsLastState(t *testing.T) {
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ctx, _, stop := reportWaits(ctx, &env{stderr: &stderr}, "tenurectl dev up: ")
	progress.Waiting(ctx, "node n1 to be Ready")
	progress.Observe(ctx, "no Ready condition yet")
	<-ctx.Done()
	err := stop(50*time.Millisecond, ctx.Err())
	want := "gave up after 50ms waiting for node n1 to be Ready ("
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "; last: no Ready condition yet): context deadline exceeded") {
		t.Errorf("got %v, want %q... naming the last state", err, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap context.DeadlineExceeded", err)
	}
}

// TestDevUpKeepsAnErrorBeforeItsDeadline: an error before the deadline is
// returned as it is.
func TestDevUpKeepsAnErrorBeforeItsDeadline(t *testing.T) {
	ctx, _, stop := reportWaits(context.Background(), &env{stderr: &bytes.Buffer{}}, "p: ")
	progress.Waiting(ctx, "kube-apiserver to be ready")
	boom := errors.New("kube-apiserver exited")
	if err := stop(time.Minute, boom); err != boom {
		t.Errorf("got %v, want %v", err, boom)
	}
}
