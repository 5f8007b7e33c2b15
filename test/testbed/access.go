package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/internal/reservation"
	"github.com/tenure-ipam/tenure/test/controlplane"
)

// The agent's identity as deploy/rbac names it.
const (
	AgentNamespace      = "tenure-system"
	AgentServiceAccount = "tenure-agent"
)

// tokenLifetime outlasts any test or demo run; a TokenRequest is not
// refreshed here as the kubelet refreshes a projected token.
const tokenLifetime = int64(3600)

// ApplyManifests creates every object of every YAML file in fsys (multi-
// document files allowed); objects that exist are left alone.
func ApplyManifests(ctx context.Context, c client.Client, fsys fs.FS) (int, error) {
	return eachManifest(fsys, func(u *unstructured.Unstructured) error {
		if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
}

// ServerSideApplyManifests applies every object of every YAML file in fsys
// as `kubectl apply --server-side --force-conflicts` does: objects that
// exist take the files' fields (a CRD a release before installed gets the
// new schema, which Helm never upgrades).
func ServerSideApplyManifests(ctx context.Context, c client.Client, fsys fs.FS, fieldOwner string) (int, error) {
	return eachManifest(fsys, func(u *unstructured.Unstructured) error {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
	})
}

// eachManifest calls do with every object of every YAML file in fsys, and
// returns how many it did.
func eachManifest(fsys fs.FS, do func(*unstructured.Unstructured) error) (int, error) {
	n := 0
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := do(u); err != nil {
				return fmt.Errorf("%s: %s %s: %w", path, u.GetKind(), u.GetName(), err)
			}
			n++
		}
	})
	return n, err
}

// InstallAgentAccess creates what deploy/ gives the agent beyond the CRDs
// (the namespace, the service accounts and roles of deploy/rbac, and the
// node-restriction admission policy of deploy/policy) and returns once the
// policy is in force: the API server loads policies asynchronously, and an
// agent started before that would run unrestricted. It returns the number
// of objects applied.
func InstallAgentAccess(ctx context.Context, admin *rest.Config) (int, error) {
	c, err := kube.NewClient(admin)
	if err != nil {
		return 0, err
	}
	n, err := ApplyManifests(ctx, c, deploy.RBAC)
	if err != nil {
		return n, err
	}
	m, err := ApplyManifests(ctx, c, deploy.AgentPolicy)
	n += m
	if err != nil {
		return n, err
	}
	// In force: a token of the agent's service account that no pod holds
	// is refused a (dry-run) reservation by the policy's first rule.
	token, err := ServiceAccountToken(ctx, admin, AgentNamespace, AgentServiceAccount, nil)
	if err != nil {
		return n, err
	}
	unbound, err := kube.NewClient(WithToken(admin, token))
	if err != nil {
		return n, err
	}
	probe := reservation.New(reservation.Spec{Network: "policy-probe", Kind: tenurev1alpha1.KindAddress,
		Item: netip.MustParsePrefix("192.0.2.1/32"),
		Owner: tenurev1alpha1.ReservationOwner{Kind: tenurev1alpha1.OwnerPod, Namespace: "probe", Name: "probe", UID: "probe",
			PodName: "probe", PodUID: "probe", Node: "probe"}})
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = unbound.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "[node-bound-token]"), nil
	})
	if err != nil {
		return n, fmt.Errorf("the agent node-restriction policy is not in force: a token bound to no pod got %v", last)
	}
	return n, nil
}

// WithToken is a copy of cfg that authenticates with token alone (cfg's
// server and CA, none of its credentials).
func WithToken(cfg *rest.Config, token string) *rest.Config {
	return &rest.Config{
		Host:            cfg.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData, ServerName: cfg.TLSClientConfig.ServerName},
		QPS:             cfg.QPS,
		Burst:           cfg.Burst,
	}
}

// ServiceAccountToken asks the API server for a token of a service account,
// bound to an object when bound is set.
func ServiceAccountToken(ctx context.Context, admin *rest.Config, namespace, name string, bound *authv1.BoundObjectReference) (string, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return "", err
	}
	expiry := tokenLifetime
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: bound}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as a
// service account through a TokenRequest bound to nothing, so a component
// run as a local process has exactly the rights its RBAC in deploy/ gives
// it. The agent needs a pod-bound token: NodeAgentKubeconfig.
func ServiceAccountKubeconfig(ctx context.Context, admin *rest.Config, namespace, name, path string) error {
	token, err := ServiceAccountToken(ctx, admin, namespace, name, nil)
	if err != nil {
		return err
	}
	return writeKubeconfig(admin, name, token, path)
}

// NodeAgentKubeconfig returns dir/NODELABEL.kubeconfig, which authenticates as
// the agent's service account with a token bound to an agent pod on node,
// as the DaemonSet's pod gets from the kubelet: the API server adds the
// node's name to every request made with it, and the node-restriction
// policy holds the agent to that node. The file is made once (a pod created
// in the agent's namespace, bound to node, and a TokenRequest bound to that
// pod); an agent restarted on the same node reuses it, as a restarted
// container keeps its pod's token. The node should exist first: without it
// the token still names the node but not its UID.
func NodeAgentKubeconfig(ctx context.Context, admin *rest.Config, node, dir string) (string, error) {
	return NodeAgentKubeconfigIn(ctx, admin, AgentNamespace, node, dir)
}

// NodeAgentKubeconfigIn is NodeAgentKubeconfig for tenure installed in
// namespace: the agent pod and its service account are there.
func NodeAgentKubeconfigIn(ctx context.Context, admin *rest.Config, namespace, node, dir string) (string, error) {
	// The node label is the name itself, or for a name too long to be a
	// label (or a file name) a shorter hash of it.
	path := filepath.Join(dir, reservation.NodeLabel(node)+".kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	c, err := kube.NewClient(admin)
	if err != nil {
		return "", err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: AgentServiceAccount + "-", Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": AgentServiceAccount}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: AgentServiceAccount,
			Containers:         []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return "", fmt.Errorf("agent pod for node %s: %w", node, err)
	}
	token, err := ServiceAccountToken(ctx, admin, namespace, AgentServiceAccount,
		&authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err != nil {
		return "", err
	}
	return path, writeKubeconfig(admin, AgentServiceAccount, token, path)
}

func writeKubeconfig(admin *rest.Config, user, token, path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.TLSClientConfig.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// AgentPolicyName is the ValidatingAdmissionPolicy of deploy/policy; the API
// server names it in every refusal.
const AgentPolicyName = "tenure-agent-node-restriction"

// PolicyRefusals returns the lines of a process log that report a refusal
// by the agent policy or the agent webhook.
func PolicyRefusals(logPath string) []string {
	b, _ := os.ReadFile(logPath)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, AgentPolicyName) || strings.Contains(line, AgentWebhookName) {
			out = append(out, line)
		}
	}
	return out
}

// KubeletClientset returns a clientset that authenticates as node's kubelet:
// a client certificate of the API server's client CA for system:node:NODE in
// system:nodes, so the Node authorizer and NodeRestriction hold it to node
// as on a real cluster (mirror pods, its pods' status, Events, its Node).
// With it a test does what root on node can do with the kubelet's
// credentials.
func KubeletClientset(cp *controlplane.ControlPlane, node string) (*kubernetes.Clientset, error) {
	cfg, err := cp.KubeletConfig(node)
	if err != nil {
		return nil, fmt.Errorf("kubelet credentials for node %s: %w", node, err)
	}
	return kubernetes.NewForConfig(cfg)
}
