package progress

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake time.Now that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lines is a writer that hands each write to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// TestReportSaysWhatItWaitsForAndHowLong: each tick prints one line naming
// the wait in progress, the time it has taken and its last state.
func TestReportSaysWhatItWaitsForAndHowLong(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := New(c.now)
	ctx, cancel := context.WithCancel(With(context.Background(), tr))
	defer cancel()
	tick, out := make(chan time.Time), make(lines)
	go tr.Report(ctx, out, "tenurectl dev up: ", tick)
	next := func() string {
		tick <- time.Time{}
		select {
		case l := <-out:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("a tick printed nothing in 10s")
			return ""
		}
	}

	Waiting(ctx, "node n1 to be Ready")
	c.add(5 * time.Second)
	got := []string{next()}
	Observe(ctx, "no Ready condition yet")
	c.add(5 * time.Second)
	got = append(got, next())
	Waiting(ctx, "tenure to roll out")
	c.add(3 * time.Second)
	got = append(got, next())

	want := []string{
		"tenurectl dev up: waiting for node n1 to be Ready (5s so far)\n",
		"tenurectl dev up: waiting for node n1 to be Ready (10s so far); last: no Ready condition yet\n",
		"tenurectl dev up: waiting for tenure to roll out (3s so far)\n",
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("printed\n%s\nwant\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}
}

// TestReportIsQuietWithoutAWait: ticks while nothing is waited for print
// nothing.
func TestReportIsQuietWithoutAWait(t *testing.T) {
	tr := New(nil)
	ctx, cancel := context.WithCancel(With(context.Background(), tr))
	tick := make(chan time.Time)
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Report(ctx, &out, "p: ", tick)
	}()
	tick <- time.Time{}
	tick <- time.Time{} // taken only once the first tick's turn is over
	cancel()
	<-done
	if out.Len() != 0 {
		t.Errorf("printed %q with no wait in progress", out.String())
	}
}

// TestGaveUpNamesTheWaitAndItsLastState: a command past its deadline
// fails naming what it waited for, for how long, and what it last saw,
// and keeps the error it failed with.
func TestGaveUpNamesTheWaitAndItsLastState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(ctx context.Context, c *clock)
		want  string
	}{
		{"no wait", func(context.Context, *clock) {},
			"gave up after 10m0s: context deadline exceeded"},
		{"a wait that observed nothing", func(ctx context.Context, c *clock) {
			Waiting(ctx, "kube-apiserver to be ready")
			c.add(2 * time.Minute)
		}, "gave up after 10m0s waiting for kube-apiserver to be ready (for 2m0s; last: nothing observed yet): context deadline exceeded"},
		{"a wait that ended", func(ctx context.Context, c *clock) {
			Waiting(ctx, "kube-apiserver to be ready")
			Observe(ctx, "connection refused")
			c.add(time.Minute)
			Done(ctx)
		}, "gave up after 10m0s: context deadline exceeded"},
		{"the last wait and its last state", func(ctx context.Context, c *clock) {
			Waiting(ctx, "node n1 to be Ready")
			Observe(ctx, "no Ready condition yet")
			c.add(time.Minute)
			Waiting(ctx, "tenure to roll out")
			Observe(ctx, "daemonset tenure-agent: ready 0")
			c.add(4 * time.Minute)
			Observe(ctx, "daemonset tenure-agent: ready 1")
		}, "gave up after 10m0s waiting for tenure to roll out (for 4m0s; last: daemonset tenure-agent: ready 1): context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			tr := New(c.now)
			tc.steps(With(context.Background(), tr), c)
			err := tr.GaveUp(10*time.Minute, context.DeadlineExceeded)
			if err.Error() != tc.want {
				t.Errorf("got  %q\nwant %q", err, tc.want)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v does not wrap context.DeadlineExceeded", err)
			}
		})
	}
}

// TestObserveKeepsOneLineOfWhatStillFails: a multi-line state (a
// /readyz body) becomes one line without the checks that passed.
func TestObserveKeepsOneLineOfWhatStillFails(t *testing.T) {
	for _, tc := range []struct{ state, want string }{
		{"no Ready condition yet", "no Ready condition yet"},
		{"GET https://127.0.0.1:6443/readyz: 500 Internal Server Error: [+]ping ok\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n",
			"GET https://127.0.0.1:6443/readyz: 500 Internal Server Error: [+]ping ok; [-]poststarthook/rbac/bootstrap-roles failed: reason withheld; readyz check failed"},
	} {
		c := &clock{}
		tr := New(c.now)
		ctx := With(context.Background(), tr)
		Waiting(ctx, "kube-apiserver to be ready")
		Observe(ctx, tc.state)
		if got, want := tr.Line(), "waiting for kube-apiserver to be ready (0s so far); last: "+tc.want; got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	}
}

// TestWithoutATrackerWaitsReportNothing: the waits of a context without a
// Tracker (the harness's tests) neither fail nor record anything.
func TestWithoutATrackerWaitsReportNothing(t *testing.T) {
	ctx := context.Background()
	Waiting(ctx, "anything")
	Observe(ctx, "anything")
	if tr := from(ctx); tr != nil {
		t.Errorf("a bare context carries %v", tr)
	}
}
