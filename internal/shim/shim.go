// Package shim implements the `tenure` binary the runtime executes: it
// checks the CNI environment, finds the node agent's socket in the network
// configuration, forwards the call and prints the agent's answer.
//
// It is as lean as the cniwire package, for the same reason: the runtime
// starts it for every attachment. It therefore reads the two IPAM keys it
// needs with a small JSON scanner (scan.go) rather than encoding/json; the
// agent parses and validates the configuration in full.
package shim

import (
	"strconv"
	"syscall"
	"time"
	"unicode"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

// DefaultFlatConfig is read when the IPAM config names no configuration_path.
// A variable so tests can point it at a file of their own.
var DefaultFlatConfig = cniwire.DefaultFlatConfig

// Timeout bounds each read and write of one call after connecting.
// Runtimes give a sandbox a few minutes in total; an agent that holds a
// call longer than this is as good as absent.
var Timeout = 90 * time.Second

// DialTimeout bounds connecting to the agent.
var DialTimeout = 2 * time.Second

// About is printed on stderr when the binary runs without CNI_COMMAND.
const About = "tenure: cluster-wide IPAM through the Kubernetes API"

// SupportedVersions are the CNI versions tenure speaks.
var SupportedVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// CNI error codes the shim reports itself, copies of internal/agent's
// (errors.go names every code tenure answers with): importing the agent or
// containernetworking/cni would add to every exec of the shim.
// TestShimCodesAreTheAgents keeps them equal.
const (
	codeInvalidEnvironmentVariables = 4
	codeIOFailure                   = 5
	codeDecodingFailure             = 6
	codeInvalidNetworkConfig        = 7
	codeInvalidNetNS                = 8
	codeTryAgainLater               = 11
	codePluginNotAvailable          = 50
)

// Env is what the runtime hands the plugin.
type Env struct {
	Getenv func(string) string
	Stdin  func() ([]byte, error)
	// OwnNetNS identifies the shim's own network namespace (dev, inode), or
	// ok=false when it cannot be read.
	OwnNetNS func() (dev, ino uint64, ok bool)
}

// Outcome is what the shim prints and how it exits.
type Outcome struct {
	Stdout, Stderr []byte
	Exit           int
}

// Run executes one CNI call.
func Run(env Env) Outcome {
	cmd := env.Getenv("CNI_COMMAND")
	switch cmd {
	case "":
		return Outcome{Stderr: aboutText()}
	case "VERSION":
		return Outcome{Stdout: versionJSON()}
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
	default:
		return fail(codeInvalidEnvironmentVariables, "unknown CNI_COMMAND: "+cmd, "")
	}
	req := cniwire.Request{
		Command: cmd, ContainerID: env.Getenv("CNI_CONTAINERID"), Netns: env.Getenv("CNI_NETNS"),
		IfName: env.Getenv("CNI_IFNAME"), Args: env.Getenv("CNI_ARGS"), Path: env.Getenv("CNI_PATH"),
	}
	if o, bad := checkEnv(&req); bad {
		return o
	}
	if (cmd == "ADD" || cmd == "DEL") && req.Netns != "" && !override(env.Getenv("CNI_NETNS_OVERRIDE")) && env.OwnNetNS != nil {
		if dev, ino, ok := env.OwnNetNS(); ok {
			var st syscall.Stat_t
			if syscall.Stat(req.Netns, &st) == nil && uint64(st.Dev) == dev && st.Ino == ino {
				return fail(codeInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same", "")
			}
		}
	}
	stdin, err := env.Stdin()
	if err != nil {
		return fail(codeIOFailure, "error reading from stdin: "+err.Error(), "")
	}
	req.StdinData = stdin
	keys, err := ipamKeys(stdin)
	if err != nil {
		return fail(codeDecodingFailure, "decoding network configuration", err.Error())
	}
	flatPath, explicit := keys.configurationPath, keys.configurationPath != ""
	if !explicit {
		flatPath = DefaultFlatConfig
	}
	data, err := readFile(flatPath)
	switch {
	case err == nil:
		req.FlatConfig, req.FlatConfigPath = data, flatPath
	case explicit || err != syscall.ENOENT:
		return fail(codeInvalidNetworkConfig, "ipam.configuration_path: "+flatPath+": cannot read", err.Error())
	}
	socket := keys.agentSocket
	if socket == "" && req.FlatConfig != nil {
		// A bad flat config is reported by the agent, with the key that is wrong.
		socket, _ = topLevelString(req.FlatConfig, "agent_socket")
	}
	if socket == "" {
		socket = cniwire.DefaultSocket
	}
	if socket[0] != '/' {
		return fail(codeInvalidNetworkConfig, "ipam.agent_socket: "+string(cniwire.AppendString(nil, socket))+": must be an absolute path", "")
	}
	msg := cniwire.AppendRequest(make([]byte, 0, 512+2*len(stdin)+2*len(data)), &req)
	if len(msg) > cniwire.MaxMessage {
		// The agent reads no more than this; sending it would end in a
		// broken pipe that reads as "agent not reachable".
		return fail(codeInvalidNetworkConfig, "network configuration too large: the request to the tenure agent is "+
			strconv.Itoa(len(msg))+" bytes, over the limit of "+strconv.Itoa(cniwire.MaxMessage)+" bytes", "")
	}
	status, payload, err := cniwire.Call(socket, msg, DialTimeout, Timeout)
	if err != nil {
		code := codeTryAgainLater
		if cmd == "STATUS" {
			code = codePluginNotAvailable
		}
		return fail(code, "tenure node agent is not reachable", err.Error())
	}
	if status == cniwire.StatusError {
		return Outcome{Stdout: payload, Exit: 1}
	}
	return Outcome{Stdout: payload}
}

// override: CNI_NETNS_OVERRIDE "1" or "true" in any case, as skel reads it.
func override(v string) bool {
	if v == "1" {
		return true
	}
	if len(v) != 4 {
		return false
	}
	for i, c := range []byte(v) {
		if c|0x20 != "true"[i] {
			return false
		}
	}
	return true
}

// checkEnv applies the CNI spec's required variables per command with the
// messages of libcni's skel, which runtimes and people already know.
func checkEnv(req *cniwire.Request) (Outcome, bool) {
	needs := func(cmds ...string) bool {
		for _, c := range cmds {
			if c == req.Command {
				return true
			}
		}
		return false
	}
	var missing []byte
	for _, v := range [...]struct {
		name     string
		val      string
		required bool
	}{
		{"CNI_CONTAINERID", req.ContainerID, needs("ADD", "CHECK", "DEL")},
		{"CNI_NETNS", req.Netns, needs("ADD", "CHECK")},
		{"CNI_IFNAME", req.IfName, needs("ADD", "CHECK", "DEL")},
		{"CNI_PATH", req.Path, true},
	} {
		if v.val == "" && v.required {
			if len(missing) > 0 {
				missing = append(missing, ',')
			}
			missing = append(missing, v.name...)
		}
	}
	if len(missing) > 0 {
		return fail(codeInvalidEnvironmentVariables, "required env variables ["+string(missing)+"] missing", ""), true
	}
	if needs("ADD", "CHECK", "DEL") {
		if !validContainerID(req.ContainerID) {
			return fail(codeInvalidEnvironmentVariables, "invalid characters in containerID", req.ContainerID), true
		}
		if msg, details := checkIfName(req.IfName); msg != "" {
			return fail(codeInvalidEnvironmentVariables, msg, details), true
		}
	}
	return Outcome{}, false
}

// validContainerID: ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, as libcni's utils.
func validContainerID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return id != ""
}

// checkIfName applies the kernel's rules for an interface name.
func checkIfName(name string) (msg, details string) {
	switch {
	case len(name) > 15:
		return "interface name is too long", "interface name should be less than 16 characters"
	case name == "." || name == "..":
		return "interface name is . or ..", ""
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) {
			return "interface name contains / or : or whitespace characters", ""
		}
	}
	return "", ""
}

func fail(code int, msg, details string) Outcome {
	return Outcome{Stdout: ErrorJSON(code, msg, details), Exit: 1}
}

// ErrorJSON is a CNI error object as the spec prints it.
func ErrorJSON(code int, msg, details string) []byte {
	b := append(make([]byte, 0, 64+len(msg)+len(details)), `{"code":`...)
	b = appendUint(b, uint(code))
	b = append(b, `,"msg":`...)
	b = cniwire.AppendString(b, msg)
	if details != "" {
		b = append(b, `,"details":`...)
		b = cniwire.AppendString(b, details)
	}
	return append(b, '}', '\n')
}

func appendUint(b []byte, v uint) []byte {
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

func versionJSON() []byte {
	b := []byte(`{"cniVersion":"1.1.0","supportedVersions":[`)
	for i, v := range SupportedVersions {
		if i > 0 {
			b = append(b, ',')
		}
		b = cniwire.AppendString(b, v)
	}
	return append(b, ']', '}', '\n')
}

func aboutText() []byte {
	b := []byte(About + "\nCNI protocol versions supported: ")
	for i, v := range SupportedVersions {
		if i > 0 {
			b = append(b, ',', ' ')
		}
		b = append(b, v...)
	}
	return append(b, '\n')
}

// readFile reads a whole file with syscalls (os would add its package
// start-up to every call).
func readFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	return cniwire.ReadAll(fd)
}
