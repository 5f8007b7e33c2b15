package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// egressConfig sends the API server's "cluster" traffic (kubelets,
// webhooks' endpoints) as HTTP CONNECT over the Unix socket.
func egressConfig(socket string) []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, strconv.Quote(socket))
}

// nodeAccessFlags are the API server's flags for Options.Nodes (kubelets
// authenticate and are authorized as on every control plane Start runs,
// APIServerFlags): the API server reaches a kubelet at its InternalIP, never by a name it would
// look up, with a client certificate of its own; webhooks' Services are
// dialled at their endpoints (there is no kube-proxy).
func nodeAccessFlags(dir, pkiDir string) ([]string, error) {
	cert, key, err := issueClientCert(pkiDir, "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(pkiDir, "kubelet-client.crt"), filepath.Join(pkiDir, "kubelet-client.key")
	for f, data := range map[string][]byte{certFile: cert, keyFile: key} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			return nil, err
		}
	}
	return []string{
		"--kubelet-client-certificate=" + certFile,
		"--kubelet-client-key=" + keyFile,
		"--kubelet-preferred-address-types=InternalIP",
		"--egress-selector-config-file=" + filepath.Join(dir, "egress.yaml"),
		"--enable-aggregator-routing=true",
	}, nil
}
