package agent

import (
	"strings"
	"testing"
)

func TestParseCNIArgs(t *testing.T) {
	cases := []struct {
		in      string
		want    podArgs
		wantErr string
	}{
		{in: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
			want: podArgs{Namespace: "ns", Name: "p", UID: "u-1", InfraContainerID: "abc"}},
		{in: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", want: podArgs{Namespace: "ns", Name: "p"}},
		{in: "", wantErr: "CNI_ARGS is empty"},
		{in: "K8S_POD_NAME=p", wantErr: "K8S_POD_NAMESPACE and K8S_POD_NAME are required"},
		{in: "K8S_POD_NAMESPACE", wantErr: "invalid pair"},
		{in: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;MAC=00:11:22:33:44:55", want: podArgs{Namespace: "ns", Name: "p"}},
		{in: "IgnoreUnknown=false;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;MAC=x", wantErr: "unknown args"},
	}
	for _, c := range cases {
		got, err := parseCNIArgs(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseCNIArgs(%q) err = %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseCNIArgs(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}
