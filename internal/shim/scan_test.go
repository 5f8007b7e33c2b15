package shim

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestIPAMKeys(t *testing.T) {
	for _, tc := range []struct {
		name, conf     string
		socket, flat   string
		wantSyntaxFail bool
	}{
		{"absent", `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"tenure"}}`, "", "", false},
		{"both", `{"name":"n","ipam":{"type":"tenure","agent_socket":"/run/a.sock","configuration_path":"/etc/t.conf"}}`, "/run/a.sock", "/etc/t.conf", false},
		{"nested decoys", `{"plugins":[{"ipam":{"agent_socket":"/no"}}],"x":{"agent_socket":"/no"},"ipam":{"routes":[{"dst":"0.0.0.0/0"}],"agent_socket":"/yes"}}`, "/yes", "", false},
		{"last wins", `{"ipam":{"agent_socket":"/a","agent_socket":"/b"}}`, "/b", "", false},
		// Found by FuzzIPAMKeys: the first ipam's socket outlived it.
		{"last ipam wins whole", `{"ipam":{"agent_socket":"/a"},"ipam":{"configuration_path":"/c"}}`, "", "/c", false},
		{"last ipam not an object", `{"ipam":{"agent_socket":"/a"},"ipam":"tenure"}`, "", "", false},
		{"escapes", `{"ipam":{"agent_socket":"\/run\/t\u00e9\"x\\.sock"}}`, "/run/té\"x\\.sock", "", false},
		{"surrogate pair", `{"ipam":{"agent_socket":"/\ud83d\ude00"}}`, "/\U0001F600", "", false},
		{"lone surrogate", `{"ipam":{"agent_socket":"/\ud83d"}}`, "/\uFFFD", "", false},
		{"non-string socket", `{"ipam":{"agent_socket":5}}`, "", "", false},
		{"ipam not an object", `{"ipam":"tenure"}`, "", "", false},
		{"numbers and literals", `{"a":-1.5e+3,"b":0,"c":true,"d":false,"e":null,"f":[],"g":{},"ipam":{"agent_socket":"/s"}}`, "/s", "", false},
		{"whitespace", " \n\t{ \"ipam\" : { \"agent_socket\" : \"/s\" } } \r\n", "/s", "", false},
		{"empty", ``, "", "", true},
		{"array", `[1]`, "", "", true},
		{"truncated", `{"ipam":{"agent_socket":"/s"`, "", "", true},
		{"trailing comma", `{"ipam":{},}`, "", "", true},
		{"trailing data", `{"ipam":{}} x`, "", "", true},
		{"bad number", `{"a":01}`, "", "", true},
		{"bad literal", `{"a":tru}`, "", "", true},
		{"control char", "{\"a\":\"x\x01\"}", "", "", true},
		{"bad escape", `{"a":"\x"}`, "", "", true},
		{"unquoted key", `{ipam:{}}`, "", "", true},
		{"deepest encoding/json takes", `{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, "", "", false},
		{"deeper than encoding/json takes", `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ipamKeys([]byte(tc.conf))
			if valid := json.Valid([]byte(tc.conf)) && strings.HasPrefix(strings.TrimSpace(tc.conf), "{"); valid == tc.wantSyntaxFail {
				t.Fatalf("the case is wrong: encoding/json says valid=%v", valid)
			}
			if (err != nil) != tc.wantSyntaxFail {
				t.Fatalf("ipamKeys: err %v, want failure %v", err, tc.wantSyntaxFail)
			}
			if err == nil && (k.agentSocket != tc.socket || k.configurationPath != tc.flat) {
				t.Fatalf("ipamKeys = %+v, want socket %q path %q", k, tc.socket, tc.flat)
			}
		})
	}
}

// FuzzIPAMKeys holds the scanner to encoding/json: the same documents are
// accepted, and the same values are read.
func FuzzIPAMKeys(f *testing.F) {
	for _, s := range []string{
		`{"ipam":{"agent_socket":"/s","configuration_path":"/c"}}`,
		`{"name":"n","ipam":{"type":"tenure","range":"10.0.0.0/29","exclude":["10.0.0.1/32"]}}`,
		`{"ipam":{"agent_socket":"\u0041\/\ud83d\ude00"}}`, `{"a":[1,-2.5e3,true,null,{"b":[]}]}`, `{}`, `[]`, `{"a":}`, `{"a":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		k, err := ipamKeys(doc)
		var top map[string]any
		jerr := json.Unmarshal(doc, &top)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("ipamKeys err %v, encoding/json err %v, for %q", err, jerr, doc)
		}
		if err != nil || !utf8.Valid(doc) {
			return // encoding/json replaces invalid UTF-8; the agent reads the real config
		}
		var want configKeys
		if ipam, ok := top["ipam"].(map[string]any); ok {
			want.agentSocket, _ = ipam["agent_socket"].(string)
			want.configurationPath, _ = ipam["configuration_path"].(string)
		}
		if k != want {
			t.Fatalf("ipamKeys = %+v, encoding/json reads %+v, for %q", k, want, doc)
		}
	})
}
