// Package progress says what a long developer command (tenurectl dev up)
// is waiting for while it waits, and why it gave up when it does.
//
// The command puts a Tracker in its context (With); the waits below it,
// however deep, name what they wait for (Waiting), what they last saw
// (Observe) and that they ended as they should (Done). The command prints the Tracker's Line every few seconds
// (Report) and, once its deadline has passed, wraps the error with GaveUp,
// which names the wait and its last state. A context without a Tracker
// makes Waiting and Observe do nothing.
package progress

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Tracker holds the wait in progress: what it waits for, since when, and
// the state it last observed.
type Tracker struct {
	now func() time.Time

	mu    sync.Mutex
	what  string
	since time.Time
	state string
}

// New returns a Tracker that reads the time from now (time.Now if nil).
func New(now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{now: now}
}

type key struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Tracker) context.Context {
	return context.WithValue(ctx, key{}, t)
}

func from(ctx context.Context) *Tracker {
	t, _ := ctx.Value(key{}).(*Tracker)
	return t
}

// Waiting records that ctx's command now waits for what ("kube-apiserver
// to be ready"); the last observed state starts empty.
func Waiting(ctx context.Context, what string) {
	if t := from(ctx); t != nil {
		t.mu.Lock()
		t.what, t.since, t.state = what, t.now(), ""
		t.mu.Unlock()
	}
}

// Done records that the current wait of ctx's command has ended as it
// should: nothing is waited for until the next Waiting.
func Done(ctx context.Context) {
	if t := from(ctx); t != nil {
		t.mu.Lock()
		t.what, t.state = "", ""
		t.mu.Unlock()
	}
}

// Observe records the state the current wait last saw (the poll's last
// answer: "no Ready condition yet"), on one line.
func Observe(ctx context.Context, state string) {
	if t := from(ctx); t != nil {
		state = oneLine(state)
		t.mu.Lock()
		t.state = state
		t.mu.Unlock()
	}
}

// oneLine joins the lines of s with "; ", leaving out the checks a
// Kubernetes /readyz or /healthz body lists as passed ("[+]etcd ok"): a
// progress line names what is still failing.
func oneLine(s string) string {
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "[+]") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "; ")
}

// Line describes the wait in progress, "" when there is none.
func (t *Tracker) Line() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.what == "" {
		return ""
	}
	line := fmt.Sprintf("waiting for %s (%v so far)", t.what, t.now().Sub(t.since).Round(time.Second))
	if t.state != "" {
		line += "; last: " + t.state
	}
	return line
}

// Report writes prefix and the Line to w on each tick, while there is a
// wait in progress, until ctx is done.
func (t *Tracker) Report(ctx context.Context, w io.Writer, prefix string, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if line := t.Line(); line != "" {
				fmt.Fprintf(w, "%s%s\n", prefix, line)
			}
		}
	}
}

// GaveUp wraps err, the error of a command whose deadline of after has
// passed, with the wait in progress and the state it last observed.
func (t *Tracker) GaveUp(after time.Duration, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.what == "" {
		return fmt.Errorf("gave up after %v: %w", after, err)
	}
	state := t.state
	if state == "" {
		state = "nothing observed yet"
	}
	return fmt.Errorf("gave up after %v waiting for %s (for %v; last: %s): %w",
		after, t.what, t.now().Sub(t.since).Round(time.Second), state, err)
}
