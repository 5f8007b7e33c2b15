package shim

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

type cniError struct {
	Code    int    `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details"`
}

// fakeAgent answers every call with answer and records the requests.
func fakeAgent(t *testing.T, answer []byte) (socket string, got chan cniwire.Request) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got = make(chan cniwire.Request, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var req cniwire.Request
			if err := json.NewDecoder(c).Decode(&req); err == nil {
				got <- req
			}
			_, _ = c.Write(answer)
			c.Close()
		}
	}()
	return socket, got
}

func env(vars map[string]string, stdin string) Env {
	return Env{
		Getenv:   func(k string) string { return vars[k] },
		Stdin:    func() ([]byte, error) { return []byte(stdin), nil },
		OwnNetNS: func() (uint64, uint64, bool) { return 0, 0, false },
	}
}

func addVars(extra map[string]string) map[string]string {
	v := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/x", "CNI_IFNAME": "net1", "CNI_PATH": "/opt/cni/bin"}
	for k, val := range extra {
		if val == "" {
			delete(v, k)
		} else {
			v[k] = val
		}
	}
	return v
}

func conf(socket string) string {
	return `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure","range":"10.0.0.0/29","agent_socket":"` + socket + `"}}`
}

func decodeError(t *testing.T, o Outcome) cniError {
	t.Helper()
	var e cniError
	if o.Exit != 1 || json.Unmarshal(o.Stdout, &e) != nil {
		t.Fatalf("want exit 1 and a CNI error on stdout, got exit %d stdout %q", o.Exit, o.Stdout)
	}
	return e
}

func TestRunRefusesBadEnvironmentWithSkelCodes(t *testing.T) {
	DefaultFlatConfig = filepath.Join(t.TempDir(), "absent.conf")
	socket, got := fakeAgent(t, []byte("0\n"))
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		code  int
		msgIn string
	}{
		{"unknown command", addVars(map[string]string{"CNI_COMMAND": "FROB"}), 4, "unknown CNI_COMMAND: FROB"},
		{"missing netns and path", addVars(map[string]string{"CNI_NETNS": "", "CNI_PATH": ""}), 4, "required env variables [CNI_NETNS,CNI_PATH] missing"},
		{"del needs no netns but a container", map[string]string{"CNI_COMMAND": "DEL", "CNI_IFNAME": "net1", "CNI_PATH": "/p"}, 4, "[CNI_CONTAINERID] missing"},
		{"container id characters", addVars(map[string]string{"CNI_CONTAINERID": "-abc"}), 4, "invalid characters in containerID"},
		{"container id slash", addVars(map[string]string{"CNI_CONTAINERID": "a/b"}), 4, "invalid characters in containerID"},
		{"ifname too long", addVars(map[string]string{"CNI_IFNAME": "abcdefghijklmnop"}), 4, "interface name is too long"},
		{"ifname dot", addVars(map[string]string{"CNI_IFNAME": ".."}), 4, "interface name is . or .."},
		{"ifname colon", addVars(map[string]string{"CNI_IFNAME": "eth0:1"}), 4, "contains / or : or whitespace"},
		{"ifname unicode space", addVars(map[string]string{"CNI_IFNAME": "eth\u00a00"}), 4, "contains / or : or whitespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := decodeError(t, Run(env(tc.vars, conf(socket))))
			if e.Code != tc.code || !strings.Contains(e.Msg, tc.msgIn) {
				t.Fatalf("got %+v, want code %d with %q", e, tc.code, tc.msgIn)
			}
		})
	}
	select {
	case r := <-got:
		t.Fatalf("a refused call reached the agent: %+v", r)
	default:
	}
}

func TestRunVersionAndAbout(t *testing.T) {
	o := Run(env(map[string]string{"CNI_COMMAND": "VERSION"}, ""))
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if o.Exit != 0 || json.Unmarshal(o.Stdout, &v) != nil || v.CNIVersion != "1.1.0" || strings.Join(v.SupportedVersions, " ") != "0.3.1 0.4.0 1.0.0 1.1.0" {
		t.Fatalf("VERSION printed %q (exit %d)", o.Stdout, o.Exit)
	}
	o = Run(env(map[string]string{}, ""))
	if o.Exit != 0 || len(o.Stdout) != 0 || !strings.Contains(string(o.Stderr), "CNI protocol versions supported: 0.3.1, 0.4.0, 1.0.0, 1.1.0") {
		t.Fatalf("no CNI_COMMAND: exit %d stdout %q stderr %q", o.Exit, o.Stdout, o.Stderr)
	}
}

func TestRunForwardsAndPrintsTheAgentsAnswer(t *testing.T) {
	flat := filepath.Join(t.TempDir(), "tenure.conf")
	if err := os.WriteFile(flat, []byte(`{"kubernetes":{"kubeconfig":"/k"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	DefaultFlatConfig = flat
	result := `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/29"}]}`
	socket, got := fakeAgent(t, []byte("0\n"+result))
	vars := addVars(map[string]string{"CNI_ARGS": "K8S_POD_NAME=p"})
	o := Run(env(vars, conf(socket)))
	if o.Exit != 0 || string(o.Stdout) != result {
		t.Fatalf("ADD: exit %d stdout %q", o.Exit, o.Stdout)
	}
	r := <-got
	if r.Command != "ADD" || r.ContainerID != "c1" || r.Netns != "/var/run/netns/x" || r.IfName != "net1" || r.Args != "K8S_POD_NAME=p" ||
		r.Path != "/opt/cni/bin" || string(r.StdinData) != conf(socket) || r.FlatConfigPath != flat || !strings.Contains(string(r.FlatConfig), "kubeconfig") {
		t.Fatalf("agent received %+v", r)
	}

	errSocket, _ := fakeAgent(t, []byte("1\n{\"code\":100,\"msg\":\"range 10.0.0.0/29 is full\"}"))
	e := decodeError(t, Run(env(vars, conf(errSocket))))
	if e.Code != 100 || e.Msg != "range 10.0.0.0/29 is full" {
		t.Fatalf("the agent's error is printed as is, got %+v", e)
	}
}

func TestRunSocketFromFlatConfigAndConfigErrors(t *testing.T) {
	dir := t.TempDir()
	socket, got := fakeAgent(t, []byte("0\n"))
	flat := filepath.Join(dir, "flat.conf")
	if err := os.WriteFile(flat, []byte(`{"agent_socket":"`+socket+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	DefaultFlatConfig = filepath.Join(dir, "absent.conf")
	withPath := `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure","configuration_path":"` + flat + `"}}`
	if o := Run(env(addVars(map[string]string{"CNI_COMMAND": "DEL"}), withPath)); o.Exit != 0 {
		t.Fatalf("DEL through the flat config's socket: exit %d %q", o.Exit, o.Stdout)
	}
	if r := <-got; r.Command != "DEL" || r.FlatConfigPath != flat {
		t.Fatalf("agent received %+v", r)
	}
	for _, tc := range []struct {
		name, conf string
		code       int
		msgIn      string
	}{
		{"not JSON", `{"name":`, 6, "decoding network configuration"},
		{"relative socket", `{"name":"n","ipam":{"agent_socket":"run/a.sock"}}`, 7, `ipam.agent_socket: "run/a.sock": must be an absolute path`},
		{"unreadable configuration_path", `{"name":"n","ipam":{"configuration_path":"` + filepath.Join(dir, "nope.conf") + `"}}`, 7, "ipam.configuration_path: " + filepath.Join(dir, "nope.conf") + ": cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := decodeError(t, Run(env(addVars(nil), tc.conf)))
			if e.Code != tc.code || !strings.Contains(e.Msg, tc.msgIn) {
				t.Fatalf("got %+v, want code %d with %q", e, tc.code, tc.msgIn)
			}
		})
	}
}

func TestRunAgentUnreachableCodes(t *testing.T) {
	DefaultFlatConfig = filepath.Join(t.TempDir(), "absent.conf")
	absent := filepath.Join(t.TempDir(), "none.sock")
	for cmd, code := range map[string]int{"ADD": 11, "DEL": 11, "STATUS": 50} {
		e := decodeError(t, Run(env(addVars(map[string]string{"CNI_COMMAND": cmd}), conf(absent))))
		if e.Code != code || !strings.Contains(e.Details, absent) {
			t.Errorf("%s with no agent: %+v, want code %d naming %s", cmd, e, code, absent)
		}
	}
}

func TestRunRefusesThePluginsOwnNetns(t *testing.T) {
	DefaultFlatConfig = filepath.Join(t.TempDir(), "absent.conf")
	socket, got := fakeAgent(t, []byte("0\n"))
	own := "/proc/self/ns/net"
	if _, _, ok := ownNetNS(); !ok {
		t.Skip("no /proc/self/ns/net")
	}
	e := env(addVars(map[string]string{"CNI_NETNS": own}), conf(socket))
	e.OwnNetNS = ownNetNS
	if ce := decodeError(t, Run(e)); ce.Code != 8 {
		t.Fatalf("ADD into the plugin's own netns: %+v, want code 8", ce)
	}
	select {
	case r := <-got:
		t.Fatalf("the refused ADD reached the agent: %+v", r)
	default:
	}
	e = env(addVars(map[string]string{"CNI_NETNS": own, "CNI_NETNS_OVERRIDE": "True"}), conf(socket))
	e.OwnNetNS = ownNetNS
	if o := Run(e); o.Exit != 0 {
		t.Fatalf("CNI_NETNS_OVERRIDE lets it through, got exit %d %q", o.Exit, o.Stdout)
	}
}

// TestRunRefusesARequestOverTheWireLimit: a network
// configuration whose request would pass the agent's limit is refused by
// the shim with the limit named, not sent to end in a broken pipe.
func TestRunRefusesARequestOverTheWireLimit(t *testing.T) {
	DefaultFlatConfig = filepath.Join(t.TempDir(), "absent.conf")
	socket, got := fakeAgent(t, []byte("0\n"))
	// 13 MB of an ignored key: under the stdin limit, over the wire limit
	// once the request carries it base64-encoded.
	big := `{"cniVersion":"1.1.0","name":"n","padding":"` + strings.Repeat("x", 13<<20) +
		`","ipam":{"type":"tenure","range":"10.0.0.0/29","agent_socket":"` + socket + `"}}`
	e := decodeError(t, Run(env(addVars(nil), big)))
	if e.Code != 7 || !strings.Contains(e.Msg, "too large") || !strings.Contains(e.Msg, strconv.Itoa(cniwire.MaxMessage)) {
		t.Fatalf("got %+v, want code 7 saying too large and naming the limit %d", e, cniwire.MaxMessage)
	}
	select {
	case req := <-got:
		t.Fatalf("the agent was called with a %s request", req.Command)
	default:
	}
}
