//go:build integration

package deploy_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamclaimsv1alpha1 "github.com/tenure-ipam/tenure/api/ipamclaims/v1alpha1"
	tenurev1alpha1 "github.com/tenure-ipam/tenure/api/v1alpha1"
	"github.com/tenure-ipam/tenure/internal/kube"
	"github.com/tenure-ipam/tenure/test/controlplane/cptest"
	"github.com/tenure-ipam/tenure/test/localoverlay"
	"github.com/tenure-ipam/tenure/test/testbed"
)

// The admission policies of deploy/policy that hold identities tenure does
// not own, and its controller.
const (
	controllerPolicy  = "tenure-controller-confinement"
	writersPolicy     = "tenure-claim-writers"
	podNetworksPolicy = "tenure-node-pod-networks"
	webhookConfigName = "tenure-agent-node-restriction"
	networksKey       = "k8s.v1.cni.cncf.io/networks"
)

// applyAdmission applies (server-side) every admission policy and binding
// of the build, as `kubectl apply -k deploy/` does. They stay for the rest
// of the test binary: they are what deploy/ installs.
func applyAdmission(t *testing.T, ctx context.Context, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range ofKind(objs, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s: %v", objKey(o), err)
		}
	}
}

// waitInForce polls probe (a dry run) until policy refuses it by rule: the
// API server loads a policy a moment after it is written.
func waitInForce(t *testing.T, ctx context.Context, policy, rule string, probe func(context.Context) error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = probe(ctx)
		return refusedBy(last, policy, rule), nil
	}); err != nil {
		t.Fatalf("policy %s not in force: its probe got %v, want refused by [%s]", policy, last, rule)
	}
}

func refusedBy(err error, policy, rule string) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
		strings.Contains(err.Error(), policy) && strings.Contains(err.Error(), "["+rule+"]")
}

func wantRefused(t *testing.T, what string, err error, policy, rule string) {
	t.Helper()
	if !refusedBy(err, policy, rule) {
		t.Errorf("%s: %v, want refused by %s [%s]", what, err, policy, rule)
	} else {
		t.Logf("%s: refused: %v", what, err)
	}
}

// onFreshRead applies change to a fresh read of obj and writes it with
// write, again on a Conflict: a verdict is never a 409.
func onFreshRead[T client.Object](ctx context.Context, c client.Client, obj T, change func(T), write func(context.Context, T) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return write(ctx, obj)
	})
}

// tokenClient is a client with a TokenRequest token of namespace/sa, bound
// to pod when it is set (the API server then names the pod's node in the
// request's user, as for every pod's token).
func tokenClient(t *testing.T, ctx context.Context, namespace, sa string, pod *corev1.Pod) client.Client {
	t.Helper()
	var bound *authv1.BoundObjectReference
	if pod != nil {
		bound = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	token, err := testbed.ServiceAccountToken(ctx, cptest.Current().Config, namespace, sa, bound)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.NewClient(testbed.WithToken(cptest.Current().Config, token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceAccountWithRole creates namespace/sa and a ClusterRole of rules
// bound to it, all removed at cleanup.
func serviceAccountWithRole(t *testing.T, ctx context.Context, c client.Client, namespace, sa string, rules []rbacv1.PolicyRule) {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, namespace); err != nil {
		t.Fatal(err)
	}
	name := "deploy-test-" + sa
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: sa}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
}

// podOn creates a pod of service account sa ("" for none) bound to node in
// namespace, removed at cleanup.
func podOn(t *testing.T, ctx context.Context, c client.Client, namespace, name, node, sa string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	if err := testbed.EnsureNamespace(ctx, c, namespace); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testbed.ForceDeletePod(context.Background(), c, namespace, name) })
	return p
}

// TestTheControllersTokenCannotSwitchItsWebhookOff: with deploy/'s RBAC and
// policies, tenure-controller's own token (a TokenRequest of its service
// account) is refused every change of its webhook configuration that would
// switch the agents' webhook off or send it elsewhere, and its deletion;
// the change cert rotation makes, the caBundle, is allowed. The stored
// configuration (by UID) keeps failurePolicy Fail and its matchConditions.
func TestTheControllersTokenCannotSwitchItsWebhookOff(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)
	applyRBAC(t, ctx, c, objs)
	applyAdmission(t, ctx, c, objs)
	built := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, find(t, objs, "ValidatingWebhookConfiguration", webhookConfigName))
	// The configuration sends the agents' requests to a controller that
	// does not run here: remove it before another test's agent writes.
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookConfigName}})
	})
	vwc := built.DeepCopy()
	if err := c.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	uid := vwc.UID

	ctrl := tokenClient(t, ctx, namespace, controllerSA, nil)
	patch := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration), opts ...client.PatchOption) error {
		// What the controller sends: a merge patch of a fresh read, with
		// its resourceVersion (internal/admission/certs.go).
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			o := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := ctrl.Get(ctx, client.ObjectKey{Name: webhookConfigName}, o); err != nil {
				return err
			}
			orig := o.DeepCopy()
			change(o)
			return ctrl.Patch(ctx, o, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), opts...)
		})
	}
	ignore := func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
		o.Webhooks[0].FailurePolicy = new(admissionregistrationv1.Ignore)
	}
	waitInForce(t, ctx, controllerPolicy, "webhook-config-ca-bundle-only", func(context.Context) error { return patch(ignore, client.DryRunAll) })

	for _, tc := range []struct {
		what   string
		change func(*admissionregistrationv1.ValidatingWebhookConfiguration)
	}{
		{"failurePolicy set to Ignore", ignore},
		{"matchConditions set to [false]", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}}
		}},
		{"rules narrowed to Events", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].Rules = o.Webhooks[0].Rules[len(o.Webhooks[0].Rules)-1:]
		}},
		{"objectSelector matching nothing", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "true"}}
		}},
		{"namespaceSelector matching nothing", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "true"}}
		}},
		{"clientConfig.service moved", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].ClientConfig.Service.Name = "somewhere-else"
		}},
		{"timeoutSeconds changed", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].TimeoutSeconds = new(int32(1))
		}},
		{"sideEffects changed", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].SideEffects = new(admissionregistrationv1.SideEffectClassNoneOnDryRun)
		}},
		{"the webhook removed", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) { o.Webhooks = nil }},
		{"the webhook renamed", func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
			o.Webhooks[0].Name = "renamed.ipam.tenure.dev"
		}},
	} {
		wantRefused(t, "the controller's token: "+tc.what, patch(tc.change), controllerPolicy, "webhook-config-ca-bundle-only")
	}
	err := ctrl.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookConfigName}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the controller's token deleting %s: %v, want Forbidden", webhookConfigName, err)
	} else {
		t.Logf("the controller's token deleting %s: refused: %v", webhookConfigName, err)
	}

	bundle := []byte("-----BEGIN CERTIFICATE-----\nZGVwbG95LXRlc3Q=\n-----END CERTIFICATE-----\n")
	if err := patch(func(o *admissionregistrationv1.ValidatingWebhookConfiguration) {
		for i := range o.Webhooks {
			o.Webhooks[i].ClientConfig.CABundle = bundle
		}
	}); err != nil {
		t.Fatalf("the controller's token writing the caBundle (cert rotation): %v", err)
	}

	got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: webhookConfigName}, got); err != nil {
		t.Fatal(err)
	}
	if got.UID != uid {
		t.Fatalf("%s has UID %s, want %s (the one created)", webhookConfigName, got.UID, uid)
	}
	// Every webhook deploy/ ships is there, in its order, as built: only
	// the caBundle the controller wrote differs.
	if len(got.Webhooks) != len(built.Webhooks) {
		t.Fatalf("%s holds %d webhooks, want the %d deploy/ ships", webhookConfigName, len(got.Webhooks), len(built.Webhooks))
	}
	for i, w := range got.Webhooks {
		want := built.Webhooks[i]
		if w.Name != want.Name {
			t.Errorf("webhook %d is %s, want %s", i, w.Name, want.Name)
		}
		if string(w.ClientConfig.CABundle) != string(bundle) {
			t.Errorf("%s: caBundle %q, want the controller's %q", w.Name, w.ClientConfig.CABundle, bundle)
		}
		if *w.FailurePolicy != *want.FailurePolicy {
			t.Errorf("%s: failurePolicy %s, want %s", w.Name, *w.FailurePolicy, *want.FailurePolicy)
		}
		if !equality.Semantic.DeepEqual(w.MatchConditions, want.MatchConditions) || !equality.Semantic.DeepEqual(w.Rules, want.Rules) ||
			!equality.Semantic.DeepEqual(w.ClientConfig.Service, want.ClientConfig.Service) {
			t.Errorf("%s: matchConditions, rules or service changed: %+v", w.Name, w)
		}
	}
}

// TestTheControllersTokenWritesOnlyItsSecretAndClaimsItMayChange: the
// controller's token creates only its certificate Secret (never a
// service-account token Secret, which the API server would fill with
// another identity's token), deletes only sticky claims, and of a claim
// changes neither the spec nor what its status records.
func TestTheControllersTokenWritesOnlyItsSecretAndClaimsItMayChange(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)
	applyRBAC(t, ctx, c, objs)
	applyAdmission(t, ctx, c, objs)
	ctrl := tokenClient(t, ctx, namespace, controllerSA, nil)

	tokenSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "agent-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: agentSA}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	waitInForce(t, ctx, controllerPolicy, "secret-own-only", func(ctx context.Context) error {
		return ctrl.Create(ctx, tokenSecret.DeepCopy(), client.DryRunAll)
	})
	wantRefused(t, "the controller's token creating a token Secret of "+agentSA, ctrl.Create(ctx, tokenSecret.DeepCopy()), controllerPolicy, "secret-own-only")
	asTokenSecret := tokenSecret.DeepCopy()
	asTokenSecret.Name = webhookTLSSecret
	wantRefused(t, "the controller's token creating its Secret's name as a token Secret", ctrl.Create(ctx, asTokenSecret, client.DryRunAll), controllerPolicy, "secret-own-only")
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: webhookTLSSecret}, Data: map[string][]byte{"k": []byte("v")}}
	if err := ctrl.Create(ctx, own, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("the controller's token creating its Secret %s: %v", webhookTLSSecret, err)
	}

	const ns = "deploy-test-claims"
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	claim := func(name string, labels map[string]string) *ipamclaimsv1alpha1.IPAMClaim {
		cl := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "vm-net", Interface: "pod16367aacb67"}}
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		cl.Status.IPs = []string{"10.1.0.5/24"}
		if err := c.Status().Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), cl) })
		return cl
	}
	vm := claim("vm-a.default", nil)
	sticky := claim("sticky-web-0", map[string]string{"ipam.tenure.dev/sticky": "true"})

	wantRefused(t, "the controller's token deleting a VM's claim", ctrl.Delete(ctx, vm.DeepCopy()), controllerPolicy, "claim-delete-sticky-only")
	wantRefused(t, "the controller's token labelling a VM's claim sticky", onFreshRead(ctx, ctrl, vm.DeepCopy(),
		func(o *ipamclaimsv1alpha1.IPAMClaim) { o.Labels = map[string]string{"ipam.tenure.dev/sticky": "true"} },
		func(ctx context.Context, o *ipamclaimsv1alpha1.IPAMClaim) error {
			return ctrl.Patch(ctx, o, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"ipam.tenure.dev/sticky":"true"}}}`)))
		}), controllerPolicy, "claim-spec-kept")
	wantRefused(t, "the controller's token changing a claim's network", ctrl.Patch(ctx, vm.DeepCopy(),
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"network":"other-net"}}`))), controllerPolicy, "claim-spec-kept")
	wantRefused(t, "the controller's token rewriting a claim's addresses", ctrl.Status().Patch(ctx, vm.DeepCopy(),
		client.RawPatch("application/merge-patch+json", []byte(`{"status":{"ips":["10.1.0.99/24"]}}`))), controllerPolicy, "claim-status-conditions-only")
	if err := ctrl.Status().Patch(ctx, vm.DeepCopy(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"status":{"conditions":[{"type":"Released","status":"False","reason":"WaitingForFinalizers","message":"test","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`))); err != nil {
		t.Errorf("the controller's token writing a condition of a claim: %v", err)
	}
	if err := ctrl.Patch(ctx, vm.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":["ipam.tenure.dev/release"]}}`))); err != nil {
		t.Errorf("the controller's token adding its finalizer to a claim: %v", err)
	}
	if err := ctrl.Delete(ctx, sticky.DeepCopy()); err != nil {
		t.Errorf("the controller's token deleting sticky claim %s: %v", sticky.Name, err)
	}

	got := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatalf("claim %s after the refused writes: %v", vm.Name, err)
	}
	if got.UID != vm.UID || got.Spec != vm.Spec || !slices.Equal(got.Status.IPs, vm.Status.IPs) || got.Labels["ipam.tenure.dev/sticky"] != "" {
		t.Errorf("claim %s (uid %s): uid %s spec %+v ips %v labels %v, want what the administrator wrote", vm.Name, vm.UID, got.UID, got.Spec, got.Status.IPs, got.Labels)
	}
	// Removed, or held by the finalizer another test's controller put on
	// it: either way being deleted.
	err := c.Get(ctx, client.ObjectKeyFromObject(sticky), got)
	if err == nil && got.DeletionTimestamp == nil {
		t.Errorf("sticky claim %s is not being deleted after the controller's delete", sticky.Name)
	}
}

// TestTheKubeletCannotRewriteItsPodsNetworks: with node A's kubelet
// credentials (Node authorizer and NodeRestriction), a pods/status update
// that adds, changes or removes the networks annotation of a pod on A is
// refused, and so is the same through pods with a token bound to a pod on A
// of a service account whose RBAC may update every pod (the stock Multus
// DaemonSet's); the kubelet's ordinary status update, and a network-status
// annotation, are allowed. The pod (by UID) keeps the networks its creator
// wrote.
func TestTheKubeletCannotRewriteItsPodsNetworks(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)
	applyAdmission(t, ctx, c, objs)
	const nodeA, ns = "deploy-test-kubelet-a", "deploy-test-kubelet"
	if _, err := testbed.CreateNode(ctx, c, nodeA); err != nil {
		t.Fatal(err)
	}
	networks := `[{"name":"vm-net","interface":"pod16367aacb67","ipam-claim-reference":"vm-a.vm-net"}]`
	victim := podOn(t, ctx, c, ns, "virt-launcher-vm-a", nodeA, "", map[string]string{networksKey: networks})
	plain := podOn(t, ctx, c, ns, "plain", nodeA, "", nil)

	kubeletCS, err := testbed.KubeletClientset(cptest.Current(), nodeA)
	if err != nil {
		t.Fatal(err)
	}
	pods := kubeletCS.CoreV1().Pods(ns)
	// The kubelet's own write: a status update on a fresh read.
	statusUpdate := func(name string, change func(*corev1.Pod), opts metav1.UpdateOptions) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(p)
			_, err = pods.UpdateStatus(ctx, p, opts)
			return err
		})
	}
	claimOther := func(p *corev1.Pod) {
		p.Annotations[networksKey] = `[{"name":"vm-net","interface":"pod16367aacb67","ipam-claim-reference":"vm-b.vm-net"}]`
	}
	waitInForce(t, ctx, podNetworksPolicy, "pod-networks-immutable", func(ctx context.Context) error {
		return statusUpdate(victim.Name, claimOther, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	})
	wantRefused(t, "node A's kubelet naming another claim in its pod's networks", statusUpdate(victim.Name, claimOther, metav1.UpdateOptions{}),
		podNetworksPolicy, "pod-networks-immutable")
	wantRefused(t, "node A's kubelet removing its pod's networks", statusUpdate(victim.Name, func(p *corev1.Pod) { delete(p.Annotations, networksKey) }, metav1.UpdateOptions{}),
		podNetworksPolicy, "pod-networks-immutable")
	wantRefused(t, "node A's kubelet adding networks to its pod", statusUpdate(plain.Name, func(p *corev1.Pod) {
		p.Annotations = map[string]string{networksKey: networks}
	}, metav1.UpdateOptions{}), podNetworksPolicy, "pod-networks-immutable")

	// A node-bound token (Multus' DaemonSet pod on A) with Multus' RBAC on pods.
	serviceAccountWithRole(t, ctx, c, "kube-system", "multus", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "list", "update", "watch"}},
	})
	multusPod := podOn(t, ctx, c, "kube-system", "kube-multus-ds-a", nodeA, "multus", nil)
	multus := tokenClient(t, ctx, "kube-system", "multus", multusPod)
	wantRefused(t, "Multus' token on node A naming another claim in a pod's networks", onFreshRead(ctx, multus, victim.DeepCopy(),
		claimOther, func(ctx context.Context, p *corev1.Pod) error { return multus.Update(ctx, p) }), podNetworksPolicy, "pod-networks-immutable")

	// What a kubelet and Multus write to a running pod.
	if err := statusUpdate(victim.Name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node A's kubelet reporting its pod Running: %v", err)
	}
	if err := onFreshRead(ctx, multus, victim.DeepCopy(), func(p *corev1.Pod) {
		p.Annotations["k8s.v1.cni.cncf.io/network-status"] = `[{"name":"vm-net","interface":"pod16367aacb67","ips":["10.1.0.5"]}]`
	}, func(ctx context.Context, p *corev1.Pod) error { return multus.Status().Update(ctx, p) }); err != nil {
		t.Fatalf("Multus' token writing the network-status of a pod on its node: %v", err)
	}

	got := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(victim), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != victim.UID || got.Annotations[networksKey] != networks || got.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s (uid %s): uid %s, networks %q, phase %s; want its creator's networks and the kubelet's phase Running",
			victim.Name, victim.UID, got.UID, got.Annotations[networksKey], got.Status.Phase)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(plain), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[networksKey]; ok || got.UID != plain.UID {
		t.Errorf("pod %s (uid %s): uid %s, networks %q, want none", plain.Name, plain.UID, got.UID, got.Annotations[networksKey])
	}
}

// TestOnlyTenureAndClaimWritersWriteClaims: a service account with the
// stock Multus DaemonSet's RBAC on k8s.cni.cncf.io (every verb on every
// resource) and write access to IPReservations, holding a token bound to its
// pod on a node, is refused creating, changing and deleting IPAMClaims and
// their status and IPReservations; KubeVirt's ipam-extensions service
// account creates and updates claims, and a cluster administrator outside
// system:masters (cluster-admin) writes reservations. The victim claim and
// reservation keep their UID and content.
func TestOnlyTenureAndClaimWritersWriteClaims(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)
	applyAdmission(t, ctx, c, objs)
	const nodeA, ns = "deploy-test-writers-a", "deploy-test-writers"
	if _, err := testbed.CreateNode(ctx, c, nodeA); err != nil {
		t.Fatal(err)
	}
	if err := testbed.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}

	serviceAccountWithRole(t, ctx, c, "kube-system", "multus-writer", []rbacv1.PolicyRule{
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{"ipam.tenure.dev"}, Resources: []string{"ipreservations", "ipreservations/status"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	})
	multus := tokenClient(t, ctx, "kube-system", "multus-writer", podOn(t, ctx, c, "kube-system", "kube-multus-ds-writer", nodeA, "multus-writer", nil))

	newClaim := func(name string) *ipamclaimsv1alpha1.IPAMClaim {
		return &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "vm-net", Interface: "pod16367aacb67"}}
	}
	waitInForce(t, ctx, writersPolicy, "writer", func(ctx context.Context) error {
		return multus.Create(ctx, newClaim("probe"), client.DryRunAll)
	})

	victim := newClaim("vm-a.vm-net")
	if err := c.Create(ctx, victim); err != nil {
		t.Fatal(err)
	}
	victim.Status.IPs = []string{"10.1.0.5/24"}
	if err := c.Status().Update(ctx, victim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), victim) })
	res := nodeReservation(nodeA, "writers-net", "10.79.0.5")
	if err := c.Create(ctx, res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), res) })

	wantRefused(t, "Multus' token creating a claim", multus.Create(ctx, newClaim("vm-b.vm-net")), writersPolicy, "writer")
	wantRefused(t, "Multus' token changing a claim", onFreshRead(ctx, multus, victim.DeepCopy(),
		func(o *ipamclaimsv1alpha1.IPAMClaim) { o.Spec.Interface = "other" },
		func(ctx context.Context, o *ipamclaimsv1alpha1.IPAMClaim) error { return multus.Update(ctx, o) }), writersPolicy, "writer")
	wantRefused(t, "Multus' token rewriting a claim's status", onFreshRead(ctx, multus, victim.DeepCopy(),
		func(o *ipamclaimsv1alpha1.IPAMClaim) { o.Status.IPs = []string{"10.1.0.99/24"} },
		func(ctx context.Context, o *ipamclaimsv1alpha1.IPAMClaim) error {
			return multus.Status().Update(ctx, o)
		}), writersPolicy, "writer")
	wantRefused(t, "Multus' token deleting a claim", multus.Delete(ctx, victim.DeepCopy()), writersPolicy, "writer")
	wantRefused(t, "Multus' token creating a reservation", multus.Create(ctx, nodeReservation(nodeA, "writers-net", "10.79.0.6")), writersPolicy, "writer")
	wantRefused(t, "Multus' token deleting a reservation", multus.Delete(ctx, res.DeepCopy()), writersPolicy, "writer")

	// KubeVirt's ipam-extensions, as its manifests name it.
	serviceAccountWithRole(t, ctx, c, "kubevirt-ipam-controller-system", "kubevirt-ipam-controller-manager", []rbacv1.PolicyRule{
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"ipamclaims"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	})
	ipamExt := tokenClient(t, ctx, "kubevirt-ipam-controller-system", "kubevirt-ipam-controller-manager",
		podOn(t, ctx, c, "kubevirt-ipam-controller-system", "kubevirt-ipam-controller-manager-0", nodeA, "kubevirt-ipam-controller-manager", nil))
	made := newClaim("vm-c.vm-net")
	made.Finalizers = []string{"kubevirt.io/persistent-ipam"}
	if err := ipamExt.Create(ctx, made); err != nil {
		t.Fatalf("ipam-extensions creating a VM's claim: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Patch(context.Background(), made, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		_ = c.Delete(context.Background(), made)
	})
	if err := onFreshRead(ctx, ipamExt, made.DeepCopy(), func(o *ipamclaimsv1alpha1.IPAMClaim) { o.Finalizers = nil },
		func(ctx context.Context, o *ipamclaimsv1alpha1.IPAMClaim) error { return ipamExt.Update(ctx, o) }); err != nil {
		t.Errorf("ipam-extensions removing its finalizer from its claim: %v", err)
	}

	// A cluster administrator who is not in system:masters: cluster-admin.
	const adminUser = "deploy-test-cluster-admin"
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: adminUser},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: adminUser}}}
	if err := c.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), crb) })
	adminCfg, err := cptest.Current().UserConfig(adminUser)
	if err != nil {
		t.Fatal(err)
	}
	clusterAdmin, err := kube.NewClient(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		// RBAC's cache learns the binding a moment after it is written.
		last = clusterAdmin.Create(ctx, nodeReservation(nodeA, "writers-net", "10.79.0.7"), client.DryRunAll)
		return last == nil, nil
	}); err != nil {
		t.Errorf("cluster-admin %s creating a reservation: %v", adminUser, last)
	}

	got := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(victim), got); err != nil {
		t.Fatalf("claim %s after Multus' writes: %v", victim.Name, err)
	}
	if got.UID != victim.UID || got.Spec != victim.Spec || !slices.Equal(got.Status.IPs, victim.Status.IPs) {
		t.Errorf("claim %s (uid %s): uid %s spec %+v ips %v, want as created", victim.Name, victim.UID, got.UID, got.Spec, got.Status.IPs)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(res), &tenurev1alpha1.IPReservation{}); err != nil {
		t.Errorf("reservation %s after Multus' delete: %v", res.Name, err)
	}
	for _, name := range []string{"probe", "vm-b.vm-net"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); !apierrors.IsNotFound(err) {
			t.Errorf("claim %s Multus' token tried to create: %v, want NotFound", name, err)
		}
	}
}

// TestTheControllerRunsOnControlPlaneNodes: the controller's Deployment, as
// kustomize and the chart's defaults render it, schedules only onto
// control-plane nodes (labelled node-role.kubernetes.io/control-plane, ""
// or "true") and tolerates their NoSchedule taint; the chart's
// controller.controlPlaneOnly=false and the local dev overlay, whose nodes
// are workers, lift the first and keep the second.
func TestTheControllerRunsOnControlPlaneNodes(t *testing.T) {
	const cpLabel = "node-role.kubernetes.io/control-plane"
	controlPlane := []map[string]string{
		{"kubernetes.io/os": "linux", cpLabel: ""},
		{"kubernetes.io/os": "linux", cpLabel: "true"},
	}
	worker := map[string]string{"kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""}
	taint := corev1.Taint{Key: cpLabel, Effect: corev1.TaintEffectNoSchedule}

	deployment := func(objs []*unstructured.Unstructured) *corev1.PodSpec {
		u := find(t, objs, "Deployment", "tenure-controller")
		spec, _, err := unstructured.NestedMap(u.Object, "spec", "template", "spec")
		if err != nil {
			t.Fatal(err)
		}
		return typed[corev1.PodSpec](t, &unstructured.Unstructured{Object: spec})
	}
	check := func(what string, spec *corev1.PodSpec, pinned bool) {
		t.Helper()
		for _, labels := range controlPlane {
			if !schedulable(t, spec, labels) {
				t.Errorf("%s: the controller cannot run on a control-plane node labelled %v", what, labels)
			}
		}
		if got := schedulable(t, spec, worker); got == pinned {
			t.Errorf("%s: the controller may run on a worker: %v, want %v", what, got, !pinned)
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			t.Errorf("%s: no toleration of the control-plane taint %v", what, taint)
		}
	}
	check("kustomize build of deploy/", deployment(kustomizeBuild(t)), true)
	check("the local dev overlay", deployment(localOverlay(t)), false)
	writeChartCRDs(t)
	check("helm template, defaults", deployment(helmTemplate(t)), true)
	check("helm template, controller.controlPlaneOnly=false", deployment(helmTemplate(t, "--set", "controller.controlPlaneOnly=false")), false)
}

// schedulable is the scheduler's node selection for spec on a node with
// labels: its nodeSelector, and any one term of its required node affinity
// (matchExpressions only: deploy/ uses no matchFields).
func schedulable(t *testing.T, spec *corev1.PodSpec, labels map[string]string) bool {
	t.Helper()
	for k, v := range spec.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) > 0 {
			t.Fatalf("node affinity term %+v uses matchFields", term)
		}
		all := true
		for _, r := range term.MatchExpressions {
			v, ok := labels[r.Key]
			switch r.Operator {
			case corev1.NodeSelectorOpExists:
				all = all && ok
			case corev1.NodeSelectorOpDoesNotExist:
				all = all && !ok
			case corev1.NodeSelectorOpIn:
				all = all && ok && slices.Contains(r.Values, v)
			case corev1.NodeSelectorOpNotIn:
				all = all && !(ok && slices.Contains(r.Values, v))
			default:
				t.Fatalf("node affinity operator %s", r.Operator)
			}
		}
		if all {
			return true
		}
	}
	return false
}

// localOverlay is test/localoverlay's kustomize build, as `tenurectl
// dev up --node` applies it.
func localOverlay(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := localoverlay.BuildFor("10.99.0.1", 6443)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestChartIdentityWriterLists: the chart's nodeRestriction.claimWriters
// and podNetworksWriters become the first variable of their policies, a
// CEL list the API server accepts; a value that is not a list is refused
// naming it.
func TestChartIdentityWriterLists(t *testing.T) {
	writeChartCRDs(t)
	ctx := testContext(t, time.Minute)
	c := adminClient(t)
	got := byKey(helmTemplateStdin(t, `
nodeRestriction:
  claimWriters: [system:serviceaccount:ovn-kubernetes:ovnkube-cluster-manager, "system:serviceaccount:vm-ops:it's"]
  podNetworksWriters: []
`))
	for name, want := range map[string]string{
		writersPolicy:     `["system:serviceaccount:ovn-kubernetes:ovnkube-cluster-manager","system:serviceaccount:vm-ops:it's"]`,
		podNetworksPolicy: `[]`,
	} {
		u := got["admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy "+name]
		if u == nil {
			t.Fatalf("the chart renders no ValidatingAdmissionPolicy %s", name)
		}
		vap := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, u)
		if v := vap.Spec.Variables[0]; v.Expression != want {
			t.Errorf("%s: first variable %s = %s, want %s", name, v.Name, v.Expression, want)
		}
		// Under a name of its own: deploy/'s may be in force already.
		vap.Name += "-rendered"
		if err := c.Create(ctx, vap, client.DryRunAll); err != nil {
			t.Errorf("%s as rendered: %v", name, err)
		}
	}
	_, stderr, err := helm(t, "template", "tenure", "charts/tenure", "--set", "nodeRestriction.claimWriters=system:serviceaccount:x:y")
	if err == nil || !strings.Contains(stderr, "nodeRestriction.claimWriters: want a list of user names") {
		t.Errorf("claimWriters as a string: %v\n%s", err, stderr)
	}
}
