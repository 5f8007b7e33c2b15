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

// CNI_ARGS of our keys alone, read without reflection, reads as
// types.LoadArgs reads it; anything else goes to LoadArgs.
func FuzzKnownArgsReadAsLoadArgsReadsThem(f *testing.F) {
	for _, s := range []string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "K8S_POD_NAME=a;K8S_POD_NAME=b", "K8S_POD_NAME=", "K8S_POD_NAME=a=b",
		"IgnoreUnknown=TRUE;K8S_POD_NAME=p", "IgnoreUnknown=yes", "K8S_POD_NAME=p;", ";", "", "CommonArgs=x", "k8s_pod_name=p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := knownArgs(s)
		if !ok {
			return
		}
		want, err := loadArgs(s)
		if err != nil || got != want {
			t.Errorf("knownArgs(%q) = %+v; LoadArgs reads %+v, %v", s, got, want, err)
		}
	})
}

// What containerd and CRI-O send is read without LoadArgs.
func TestARuntimesArgsAreReadWithoutReflection(t *testing.T) {
	s := "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u"
	got, ok := knownArgs(s)
	if want := (podArgs{Namespace: "ns", Name: "p", UID: "u", InfraContainerID: "c"}); !ok || got != want {
		t.Errorf("knownArgs(%q) = %+v, %v; want %+v, true", s, got, ok, want)
	}
}

// BenchmarkCNIArgs is a runtime's CNI_ARGS read by hand and by LoadArgs.
func BenchmarkCNIArgs(b *testing.B) {
	const s = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-7d9f8-abcde;K8S_POD_INFRA_CONTAINER_ID=9b2d4f6a8c0e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a;K8S_POD_UID=3f1c2a9e-8b7d-4c6e-9a1f-2b3c4d5e6f70"
	b.Run("parseCNIArgs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = parseCNIArgs(s)
		}
	})
	b.Run("LoadArgs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = loadArgs(s)
		}
	})
}
