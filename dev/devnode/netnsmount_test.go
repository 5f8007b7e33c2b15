package devnode

import (
	"strings"
	"testing"
)

func TestPropagatesReadsTheMountThatHoldsTheDirectory(t *testing.T) {
	const (
		privateRoot = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
		sharedRoot  = "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
		privateRun  = "30 27 0:25 / /run rw,nosuid - tmpfs tmpfs rw\n"
		sharedRun   = "30 27 0:25 / /run rw,nosuid shared:5 - tmpfs tmpfs rw\n"
		slaveNetns  = "40 30 0:25 /netns /run/netns rw master:5 - tmpfs tmpfs rw\n"
		runner      = "41 27 0:26 / /runner rw shared:9 - tmpfs tmpfs rw\n" // a sibling whose name starts alike
		netnsBound  = "42 40 0:4 net:[4026532] /run/netns/cni-1 rw - nsfs nsfs rw\n"
	)
	for _, tc := range []struct {
		name, mountinfo string
		want            bool
	}{
		{"a private / (no systemd)", privateRoot, false},
		{"a shared / (systemd's)", sharedRoot, true},
		{"a private /run on a shared /", sharedRoot + privateRun, false},
		{"a shared /run on a private /", privateRoot + sharedRun + runner, true},
		{"a slave /run/netns", privateRoot + privateRun + slaveNetns + netnsBound, true},
		{"a sibling that shares a prefix counts for nothing", privateRoot + runner, false},
		{"a later mount on the same point hides the earlier", sharedRoot + sharedRun + privateRun, false},
	} {
		got, err := propagates(strings.NewReader(tc.mountinfo), "/run/netns")
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := propagates(strings.NewReader(""), "/run/netns"); err == nil {
		t.Error("no mount at all: want an error")
	}
}
