package agent

import (
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/shim"
)

func TestValidateCallAppliesSkelsConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		cmd, conf string
		code      uint // 0: accepted
		msgIn     string
	}{
		{"ADD", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"ADD", `{"cniVersion":"0.3.1","name":"san"}`, 0, ""},
		{"DEL", `{"cniVersion":"1.0.0","name":"san"}`, 0, ""},
		{"CHECK", `{"cniVersion":"0.4.0","name":"san"}`, 0, ""},
		{"GC", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"STATUS", `{"cniVersion":"1.1.0","name":"san"}`, 0, ""},
		{"FROB", `{"cniVersion":"1.1.0","name":"san"}`, 4, "unknown CNI_COMMAND: FROB"},
		{"ADD", `{"cniVersion":"1.1.0"`, 6, "error unmarshall network config"},
		{"ADD", `{"cniVersion":"1.1.0"}`, 7, "missing network name"},
		{"ADD", `{"cniVersion":"1.1.0","name":"bad name"}`, 7, "invalid characters found in network name"},
		{"ADD", `{"cniVersion":"9.9.9","name":"san"}`, 1, "incompatible CNI versions"},
		{"ADD", `{"cniVersion":"one","name":"san"}`, 1, "incompatible CNI versions"},
		{"ADD", `{"name":"san"}`, 1, "incompatible CNI versions"}, // no cniVersion is 0.1.0
		{"CHECK", `{"cniVersion":"0.3.1","name":"san"}`, 1, "config version does not allow CHECK"},
		{"GC", `{"cniVersion":"1.0.0","name":"san"}`, 1, "config version does not allow GC"},
		{"STATUS", `{"cniVersion":"0.4.0","name":"san"}`, 1, "config version does not allow STATUS"},
	} {
		err := validateCall(&cniwire.Request{Command: tc.cmd, StdinData: []byte(tc.conf)})
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%s %s: refused: %v", tc.cmd, tc.conf, err)
		case tc.code != 0 && (err == nil || err.Code != tc.code || !strings.Contains(err.Msg, tc.msgIn)):
			t.Errorf("%s %s: got %v, want code %d with %q", tc.cmd, tc.conf, err, tc.code, tc.msgIn)
		}
	}
}

func TestShimAndAgentSpeakTheSameVersions(t *testing.T) {
	if got, want := strings.Join(shim.SupportedVersions, " "), strings.Join(Versions.SupportedVersions(), " "); got != want {
		t.Fatalf("the shim prints %s for VERSION, the agent accepts %s", got, want)
	}
}
