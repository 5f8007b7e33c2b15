package shim

import (
	"testing"
	"unicode/utf8"

	"github.com/tenure-ipam/tenure/internal/cniwire"
	"github.com/tenure-ipam/tenure/internal/config"
)

// FuzzShimAgreesWithAgent holds the shim's reading of a network config and
// flat config, made with its own scanner before it can reach the agent, to
// the agent's config.Parse of the same two inputs: a config the shim
// refuses is one the agent refuses too, and for a config the agent accepts,
// the socket the shim dials (ipam.agent_socket, else the flat config's, else
// the default, as Run picks it) is the agent_socket of the merged config.
func FuzzShimAgreesWithAgent(f *testing.F) {
	for _, s := range [][2]string{
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, ``},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24","agent_socket":"/run/a.sock"}}`, `{"agent_socket":"/run/flat.sock"}`},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure","configuration_path":"/etc/t.conf"}}`, `{"range":"10.0.0.0/24","agent_socket":"/run/flat.sock"}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24","agent_socket":null}}`, `{"agent_socket":"/run/flat.sock"}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24","agent_socket":"\/run\/t\u00e9.sock"}}`, `{"agent_socket":"/no"}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, `{"agent_socket":"/a","agent_socket":"/b"}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, `{"agent_socket":""}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24"}}`, `{"ipam":{"agent_socket":"/nested"}}`},
		{`{"name":"n","ipam":"tenure"}`, `{}`},
		{`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/24"}} x`, ``},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, netconf, flat []byte) {
		keys, shimErr := ipamKeys(netconf)
		cfg, agentErr := config.Parse(netconf, flat)
		if shimErr != nil {
			if agentErr == nil {
				t.Fatalf("the shim refuses %q (%v), the agent accepts it", netconf, shimErr)
			}
			return
		}
		if agentErr != nil || !utf8.Valid(netconf) || !utf8.Valid(flat) {
			return // encoding/json replaces invalid UTF-8; the shim dials the bytes as written
		}
		socket := keys.agentSocket
		if socket == "" && len(flat) > 0 {
			socket, _ = topLevelString(flat, "agent_socket")
		}
		if socket == "" {
			socket = cniwire.DefaultSocket
		}
		if socket != cfg.AgentSocket {
			t.Fatalf("the shim dials %q, the agent's config says agent_socket %q, for %q over flat config %q", socket, cfg.AgentSocket, netconf, flat)
		}
	})
}
