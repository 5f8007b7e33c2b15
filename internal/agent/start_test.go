package agent

import (
	"strings"
	"testing"
)

// TestStartLogsWhatTheNodeHolds: the start-up line counts the reservations
// this node holds, though its window of other nodes' blocks is still
// empty (an agent restarted by an upgrade on a node with running pods).
func TestStartLogsWhatTheNodeHolds(t *testing.T) {
	h := startAgent(t,
		heldBy("san", "10.0.0.1", "uid-p1", thisNode),
		heldBy("san", "10.0.0.2", "uid-p2", thisNode),
		heldBy("san", "10.0.0.3", "uid-p3", thisNode),
		heldBy("san", "10.0.0.4", "uid-q", "node-b"),
	)
	var line string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, `msg="caches synced"`) {
			line = l
		}
	}
	if !strings.Contains(line, " reservations=3") {
		t.Fatalf("start-up line %q, want reservations=3: the three of %s, not node-b's", line, thisNode)
	}
}
