package testbed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	"github.com/tenure-ipam/tenure/deploy"
	"github.com/tenure-ipam/tenure/internal/admission"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
)

// AgentWebhookName is the webhook of deploy/webhook; the API server names
// it in every refusal ("admission webhook "NAME" denied the request").
const AgentWebhookName = "agent-node-restriction.ipam.tenure.dev"

// StartAgentWebhook serves the agent node-restriction webhook of
// internal/admission in this process, as a controller replica does: with
// the controller's service account (its RBAC of deploy/rbac, applied
// first by InstallAgentAccess), its own CA and serving certificate in the
// Secret the Deployment's uses, and the caBundle patched into
// deploy/webhook's configuration. The configuration reaches it by URL on
// 127.0.0.1 (there is no Service to route to). It returns once the webhook
// is in force: a token bound to an agent pod is refused, by a rule of the
// webhook, a claim the agent never creates. log receives the webhook's
// decisions (nil: discarded).
func StartAgentWebhook(ctx context.Context, admin *rest.Config, nodeDir string, log *slog.Logger) (wh *AgentWebhook, err error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ac, err := kube.NewClient(admin)
	if err != nil {
		return nil, err
	}
	token, err := ServiceAccountToken(ctx, admin, AgentNamespace, "tenure-controller", nil)
	if err != nil {
		return nil, err
	}
	cc, err := kube.NewClient(WithToken(admin, token))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := func() { cancel(); _ = l.Close() }
	defer func() {
		if err != nil {
			stop()
		}
	}()
	vwc, err := webhookConfig("https://" + l.Addr().String() + admission.Path)
	if err != nil {
		return nil, err
	}
	if err := ac.Create(ctx, vwc); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
	}
	certs := &admission.Certs{Client: cc, Namespace: AgentNamespace, Secret: "tenure-controller-webhook-tls", WebhookConfig: vwc.Name,
		Names: admission.Names{DNS: []string{"tenure-controller-webhook.tenure-system.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, Log: log}
	if err := certs.Ensure(ctx); err != nil {
		return nil, err
	}
	go certs.Run(sctx, time.Minute)
	pods, err := podBindings(sctx, WithToken(admin, token))
	if err != nil {
		return nil, err
	}
	admission.Serve(sctx, l, &admission.Handler{Reader: cc, Log: log, Pods: pods}, certs, log)

	// In force: an agent pod's token is refused a claim that is no sticky
	// claim, by the webhook's rule (dry run: nothing is written).
	if _, err := CreateNode(ctx, ac, "webhook-probe"); err != nil {
		return nil, err
	}
	kc, err := NodeAgentKubeconfig(ctx, admin, "webhook-probe", nodeDir)
	if err != nil {
		return nil, err
	}
	cfg, err := kube.RESTConfig(kc)
	if err != nil {
		return nil, err
	}
	agent, err := kube.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	probe := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: "webhook-probe"},
		Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "probe", Interface: "net1"}}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = agent.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "["+admission.RuleClaimCreateSticky+"]"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("the agent node-restriction webhook is not in force: an agent pod's token creating a claim got %v", last)
	}
	return &AgentWebhook{Certs: certs, Stop: stop}, nil
}

// AgentWebhook is the webhook StartAgentWebhook serves.
type AgentWebhook struct {
	// Certs keeps its certificate, Secret and caBundle.
	Certs *admission.Certs
	// Stop stops serving.
	Stop func()
}

// webhookConfig is deploy/webhook's configuration, pointed at url.
func webhookConfig(url string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := deploy.AgentWebhook.ReadFile("webhook/agent-node-restriction.yaml")
	if err != nil {
		return nil, err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(vwc); err != nil {
		return nil, err
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	return vwc, nil
}

// StartNodeRestriction puts the node restriction in force on the control
// plane whose admin config and directory are given, as deploy/ does: the
// agents' RBAC from deploy/rbac, the policy of deploy/policy, and the
// webhook of deploy/webhook served here as a controller replica serves it,
// logging to webhook.log in dir.
func StartNodeRestriction(ctx context.Context, admin *rest.Config, dir string) (*AgentWebhook, error) {
	if _, err := InstallAgentAccess(ctx, admin); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "webhook.log"))
	if err != nil {
		return nil, err
	}
	return StartAgentWebhook(ctx, admin, filepath.Join(dir, "webhook-probe"),
		slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// Main is the TestMain of a package whose agents run as the DaemonSet's
// would, over one control plane (cptest.Main): it builds tenure's binaries
// into bins, runs before on the control plane (nil: nothing), puts the
// node restriction in force (StartNodeRestriction, the webhook in *wh),
// runs the tests and stops the webhook. It returns the exit code.
func Main(m *testing.M, bins *Binaries, wh **AgentWebhook, before func(ctx context.Context, cp *controlplane.ControlPlane) error) int {
	var err error
	if *bins, err = Build(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := cptest.Main(m, func(cp *controlplane.ControlPlane) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if before != nil {
			if err := before(ctx, cp); err != nil {
				return err
			}
		}
		var err error
		*wh, err = StartNodeRestriction(ctx, cp.Config, cp.Dir)
		return err
	})
	if *wh != nil {
		(*wh).Stop()
	}
	return code
}

// podBindings is the webhook's pod cache as a controller replica keeps
// it (Controller.PodBinding): an informer on every pod, read with the
// controller's service account, synced before it returns.
func podBindings(ctx context.Context, cfg *rest.Config) (func(namespace, name string) (string, string, bool), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Pods().Informer()
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the webhook's pod cache did not sync")
	}
	return func(namespace, name string) (string, string, bool) {
		obj, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
		if err != nil || !ok {
			return "", "", false
		}
		p, isPod := obj.(*corev1.Pod)
		if !isPod || p.Spec.NodeName == "" {
			return "", "", false
		}
		return string(p.UID), p.Spec.NodeName, true
	}, nil
}
