package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// toldOnce remembers, per reservation, the value last told about it (the
// node it waits for, the MAC that answered), so that each is told once;
// gauge counts the reservations remembered.
type toldOnce struct {
	gauge prometheus.Gauge
	mu    sync.Mutex
	told  map[string]string // reservation name: the value told
}

func newToldOnce(gauge prometheus.Gauge) *toldOnce {
	return &toldOnce{gauge: gauge, told: map[string]string{}}
}

// first records value for name and reports whether it was not the value
// told already.
func (t *toldOnce) first(name, value string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.told[name] == value {
		return false
	}
	t.told[name] = value
	t.gauge.Set(float64(len(t.told)))
	return true
}

// forget drops a reservation that is released, deleted or no longer
// waiting.
func (t *toldOnce) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.told[name]; ok {
		delete(t.told, name)
		t.gauge.Set(float64(len(t.told)))
	}
}
