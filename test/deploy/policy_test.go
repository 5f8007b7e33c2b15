//go:build integration

package deploy_test

import (
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tenure-ipam/tenure/internal/cniwire"
)

const (
	agentSocket = cniwire.DefaultSocket
	leaseName   = "tenure-controller" // --leader-election-id
)

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func container(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// flagValue returns the value of --name=value (or --name value) in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1], true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

func checkResources(t *testing.T, what string, c *corev1.Container) {
	t.Helper()
	r := c.Resources
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r.Requests[n]; !ok || q.IsZero() {
			t.Errorf("%s container %s: no %s request", what, c.Name, n)
		}
		if q, ok := r.Limits[n]; !ok || q.IsZero() {
			t.Errorf("%s container %s: no %s limit", what, c.Name, n)
		}
	}
}

// mountFor returns the volume mounted at dir (or a parent of it) in c.
func mountFor(t *testing.T, spec *corev1.PodSpec, c *corev1.Container, dir string) (*corev1.VolumeMount, *corev1.Volume) {
	t.Helper()
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if (dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = m
		}
	}
	if best == nil {
		t.Fatalf("container %s: nothing mounted at %s", c.Name, dir)
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == best.Name {
			return best, &spec.Volumes[i]
		}
	}
	t.Fatalf("container %s mounts volume %s, which the pod does not have", c.Name, best.Name)
	return nil, nil
}

func TestAgentDaemonSet(t *testing.T) {
	objs := kustomizeBuild(t)
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "tenure-agent"))
	spec := &ds.Spec.Template.Spec

	if !spec.HostNetwork {
		t.Error("agent: not hostNetwork")
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("agent: dnsPolicy %q, want ClusterFirstWithHostNet with host networking", spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("agent: priorityClassName %q", spec.PriorityClassName)
	}
	if spec.ServiceAccountName != agentSA {
		t.Errorf("agent: serviceAccountName %q", spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
		t.Error("agent: service account token not mounted: the agent uses its in-cluster service account")
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("agent: updateStrategy %q", ds.Spec.UpdateStrategy.Type)
	}
	tolerAll := false
	for _, tol := range spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
			tolerAll = true
		}
	}
	if !tolerAll {
		t.Errorf("agent: no toleration of every taint (operator Exists, no key, no effect): %+v", spec.Tolerations)
	}

	for _, c := range allContainers(spec) {
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			t.Errorf("agent container %s is not privileged", c.Name)
		}
		checkResources(t, "agent", &c)
		// No kubeconfig or token is handed to, or written on, the host.
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if strings.Contains(a, "kubeconfig") || strings.Contains(a, "token") {
				t.Errorf("agent container %s: argument %q: the agent must use its in-cluster service account", c.Name, a)
			}
		}
	}
	// The agent serves its metrics (tenure_dhcpv6_messages_total, ...) on
	// a port the pod declares.
	agent := &spec.Containers[0]
	metricsAddr, ok := flagValue(append(slices.Clone(agent.Command), agent.Args...), "metrics-addr")
	if !ok || metricsAddr == "" || metricsAddr == "0" {
		t.Errorf("agent: --metrics-addr unset (%q): the DaemonSet serves no metrics", metricsAddr)
	} else if _, p, err := net.SplitHostPort(metricsAddr); err != nil {
		t.Errorf("agent --metrics-addr=%q: %v", metricsAddr, err)
	} else if !slices.ContainsFunc(agent.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == "metrics" && strconv.Itoa(int(cp.ContainerPort)) == p
	}) {
		t.Errorf("agent: no container port named metrics on %s: %+v", p, agent.Ports)
	}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		switch p := path.Clean(v.HostPath.Path); p {
		case "/opt/cni/bin", "/etc/cni/net.d", "/run/tenure", "/run/netns":
		default:
			t.Errorf("agent: unexpected hostPath volume %s (%s)", v.Name, p)
		}
	}

	// The init container installs the shim and the flat config.
	if len(spec.InitContainers) != 1 {
		t.Fatalf("agent: %d init containers, want the installer only", len(spec.InitContainers))
	}
	ic := &spec.InitContainers[0]
	if len(ic.Command) < 2 || path.Base(ic.Command[0]) != "tenure-agent" || ic.Command[1] != "install" {
		t.Errorf("agent init container command %q, want tenure-agent install", ic.Command)
	}
	args := append(slices.Clone(ic.Command), ic.Args...)
	for flag, host := range map[string]string{"cni-bin-dir": "/opt/cni/bin", "cni-conf-dir": "/etc/cni/net.d"} {
		dir, ok := flagValue(args, flag)
		if !ok {
			dir = "/host" + host // the installer's default
		}
		_, vol := mountFor(t, spec, ic, dir)
		if vol.HostPath == nil || path.Clean(vol.HostPath.Path) != host {
			t.Errorf("agent init container --%s=%s is not the host's %s (volume %s)", flag, dir, host, vol.Name)
		}
	}
	flatPath, ok := flagValue(args, "flat-config")
	if !ok {
		t.Fatal("agent init container: no --flat-config")
	}
	cm, _ := flatConfig(t, objs)
	m, vol := mountFor(t, spec, ic, flatPath)
	if vol.ConfigMap == nil || vol.ConfigMap.Name != cm.GetName() || strings.TrimPrefix(flatPath, strings.TrimSuffix(m.MountPath, "/")+"/") != flatConfigKey {
		t.Errorf("agent init container --flat-config=%s is not key %s of ConfigMap %s", flatPath, flatConfigKey, cm.GetName())
	}

	// The agent: node name from the downward API, socket on the host.
	ac := container(t, spec.Containers, "agent")
	aargs := append(slices.Clone(ac.Command), ac.Args...)
	if v, _ := flagValue(aargs, "node-name"); v != "$(NODE_NAME)" {
		t.Errorf("agent --node-name=%q, want $(NODE_NAME)", v)
	}
	env := false
	for _, e := range ac.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			env = true
		}
	}
	if !env {
		t.Error("agent: NODE_NAME does not come from spec.nodeName")
	}
	sock, _ := flagValue(aargs, "socket")
	if sock != agentSocket {
		t.Errorf("agent --socket=%q, want %s (the shim's default)", sock, agentSocket)
	}
	_, vol = mountFor(t, spec, ac, path.Dir(sock))
	if vol.HostPath == nil || path.Clean(vol.HostPath.Path) != path.Dir(agentSocket) {
		t.Errorf("agent socket directory is not the host's %s", path.Dir(agentSocket))
	}
	for name, p := range map[string]*corev1.Probe{"liveness": ac.LivenessProbe, "readiness": ac.ReadinessProbe} {
		if p == nil || p.Exec == nil {
			t.Errorf("agent: no exec %s probe", name)
			continue
		}
		cmd := p.Exec.Command
		if len(cmd) < 2 || path.Base(cmd[0]) != "tenure-agent" || cmd[1] != "health" {
			t.Errorf("agent %s probe %q, want tenure-agent health", name, cmd)
		}
		if s, _ := flagValue(cmd, "socket"); s != sock {
			t.Errorf("agent %s probe asks socket %q, the agent listens on %q", name, s, sock)
		}
		if _, ready := flagValue(cmd, "ready"); ready != (name == "readiness") {
			t.Errorf("agent %s probe %q: --ready belongs to readiness only", name, cmd)
		}
	}
}

func TestControllerDeployment(t *testing.T) {
	objs := kustomizeBuild(t)
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "tenure-controller"))
	spec := &d.Spec.Template.Spec

	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("controller: hostNetwork %v hostPID %v hostIPC %v, want the pod network and no host namespaces", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("controller: hostPath volume %s", v.Name)
		}
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("controller: replicas %v, want 2", d.Spec.Replicas)
	}
	if spec.ServiceAccountName != controllerSA {
		t.Errorf("controller: serviceAccountName %q", spec.ServiceAccountName)
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("controller: %d containers, %d init containers", len(spec.Containers), len(spec.InitContainers))
	}
	c := &spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("controller: no container securityContext")
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	if !nonRoot {
		t.Error("controller: runAsNonRoot is not true")
	}
	for _, uid := range []*int64{psc.RunAsUser, sc.RunAsUser} {
		if uid != nil && *uid == 0 {
			t.Error("controller: runAsUser 0")
		}
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("controller: privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("controller: allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("controller: readOnlyRootFilesystem is not true")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("controller: capabilities %+v, want drop ALL and add none", sc.Capabilities)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("controller: seccompProfile %+v, want RuntimeDefault", seccomp)
	}
	checkResources(t, "controller", c)

	args := append(slices.Clone(c.Command), c.Args...)
	if v, ok := flagValue(args, "leader-elect"); !ok || (v != "" && v != "true") {
		t.Errorf("controller: leader election not enabled (%q)", args)
	}
	// The Lease's namespace is the pod's own (the downward API), so an
	// overlay that moves tenure moves it too.
	if v, _ := flagValue(args, "leader-election-namespace"); v != "$(POD_NAMESPACE)" {
		t.Errorf("controller: --leader-election-namespace=%q, want $(POD_NAMESPACE)", v)
	}
	if e := envVar(c, "POD_NAMESPACE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("controller: POD_NAMESPACE %+v, want the pod's metadata.namespace", e)
	}
	if v, _ := flagValue(args, "leader-election-id"); v != leaseName {
		t.Errorf("controller: --leader-election-id=%q, want %s (the Lease its Role names)", v, leaseName)
	}
	port := func(flag, def string) int32 {
		addr, ok := flagValue(args, flag)
		if !ok {
			addr = def
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("controller --%s=%q: %v", flag, addr, err)
		}
		n, err := net.LookupPort("tcp", p)
		if err != nil {
			t.Fatal(err)
		}
		return int32(n)
	}
	metricsPort, healthPort := port("metrics-addr", ":9465"), port("health-addr", ":9466")
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.Int {
			return p.IntVal
		}
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort
			}
		}
		t.Errorf("controller: probe port %q is not a container port", p.StrVal)
		return 0
	}
	for name, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if want.p == nil || want.p.HTTPGet == nil {
			t.Errorf("controller: no httpGet %s probe", name)
			continue
		}
		if want.p.HTTPGet.Path != want.path || resolve(want.p.HTTPGet.Port) != healthPort {
			t.Errorf("controller %s probe GET %s on %v, want %s on the health port %d", name, want.p.HTTPGet.Path, want.p.HTTPGet.Port.String(), want.path, healthPort)
		}
	}
	hasPort := false
	for _, cp := range c.Ports {
		if cp.ContainerPort == metricsPort && cp.Name == "metrics" {
			hasPort = true
		}
	}
	if !hasPort {
		t.Errorf("controller: no container port named metrics on %d", metricsPort)
	}

	// The leader-election Lease is reachable in tenure-system.
	rb := typed[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "tenure-controller-leader-election"))
	role := typed[rbacv1.Role](t, find(t, objs, "Role", rb.RoleRef.Name))
	if rb.Namespace != namespace || role.Namespace != namespace || rb.RoleRef.Kind != "Role" {
		t.Errorf("leader election Role/RoleBinding in %s/%s, want %s", role.Namespace, rb.Namespace, namespace)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != controllerSA || rb.Subjects[0].Namespace != namespace {
		t.Errorf("leader election RoleBinding subjects %+v", rb.Subjects)
	}
	for _, verb := range []string{"get", "create", "update"} {
		ok := false
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, verb) &&
				(len(r.ResourceNames) == 0 || (verb != "create" && slices.Contains(r.ResourceNames, leaseName))) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("leader election Role does not let the controller %s its Lease %s", verb, leaseName)
		}
	}
}

// A release tag: v1.2.3, 1.2, 3.10, 1.26.8-trixie; never latest, stable,
// main, nightly and the like.
var versionTag = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+)*([-+_.][0-9A-Za-z._-]+)?$`)

// imagePinned reports why ref floats, or "" when it names a fixed image.
func imagePinned(ref string) string {
	if _, digest, ok := strings.Cut(ref, "@"); ok {
		if strings.HasPrefix(digest, "sha256:") && len(digest) == len("sha256:")+64 {
			return ""
		}
		return "malformed digest"
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok || tag == "":
		return "no tag (means :latest)"
	case tag == "latest":
		return ":latest"
	case !versionTag.MatchString(tag):
		return "tag " + tag + " is not a release version"
	}
	return ""
}

// podImages finds every container image in u, whatever its kind.
func podImages(u *unstructured.Unstructured) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
					if list, ok := e.([]any); ok {
						for _, c := range list {
							if m, ok := c.(map[string]any); ok {
								img, _ := m["image"].(string)
								out = append(out, img)
							}
						}
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(u.Object)
	return out
}

func TestImagesPinned(t *testing.T) {
	objs := kustomizeBuild(t)
	seen := map[string]bool{}
	for _, o := range objs {
		for _, img := range podImages(o) {
			seen[img] = true
			if why := imagePinned(img); why != "" {
				t.Errorf("%s: image %q floats: %s", objKey(o), img, why)
			}
		}
	}
	if len(seen) != 1 {
		t.Errorf("images %v: want one image for every binary", seen)
	}
	for img := range seen {
		t.Logf("image %s", img)
		if !strings.HasPrefix(img, "ghcr.io/tenure-ipam/tenure:") && !strings.HasPrefix(img, "ghcr.io/tenure-ipam/tenure@") {
			t.Errorf("image %s is not tenure's", img)
		}
	}
	for _, tc := range []struct {
		ref   string
		float bool
	}{
		{"ghcr.io/tenure-ipam/tenure:v0.1.0", false},
		{"registry.k8s.io/pause:3.10", false},
		{"localhost:5000/tenure:v1.2.3", false},
		{"ghcr.io/x/y@sha256:" + strings.Repeat("a", 64), false},
		{"ghcr.io/tenure-ipam/tenure", true},
		{"localhost:5000/tenure", true},
		{"ghcr.io/tenure-ipam/tenure:latest", true},
		{"ghcr.io/tenure-ipam/tenure:main", true},
		{"ghcr.io/tenure-ipam/tenure:", true},
	} {
		if got := imagePinned(tc.ref) != ""; got != tc.float {
			t.Errorf("imagePinned(%q) floats=%v, want %v", tc.ref, got, tc.float)
		}
	}
}

func rulesOf(t *testing.T, objs []*unstructured.Unstructured, kind, name string) []rbacv1.PolicyRule {
	t.Helper()
	switch kind {
	case "ClusterRole":
		return typed[rbacv1.ClusterRole](t, find(t, objs, kind, name)).Rules
	default:
		return typed[rbacv1.Role](t, find(t, objs, kind, name)).Rules
	}
}

// grants reports whether a rule of rules allows verb on resource in group.
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

// TestRBACStatic reads the roles as written: no wildcards, no access to
// Secrets, the agent cannot delete pods, and each binding binds its own
// service account to its own role.
// webhookTLSSecret is the one Secret the controller may read and write.
const webhookTLSSecret = "tenure-controller-webhook-tls"

func TestRBACStatic(t *testing.T) {
	objs := kustomizeBuild(t)
	for _, o := range ofKind(objs, "ClusterRole", "Role") {
		rules := rulesOf(t, objs, o.GetKind(), o.GetName())
		if len(rules) == 0 {
			t.Errorf("%s has no rules", objKey(o))
		}
		if ar, _, _ := unstructured.NestedFieldNoCopy(o.Object, "aggregationRule"); ar != nil {
			t.Errorf("%s aggregates other roles", objKey(o))
		}
		for i, r := range rules {
			for field, vals := range map[string][]string{"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups} {
				for _, v := range vals {
					if strings.Contains(v, "*") {
						t.Errorf("%s rule %d: %s contains %q", objKey(o), i, field, v)
					}
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s rule %d grants non-resource URLs %v", objKey(o), i, r.NonResourceURLs)
			}
			for _, res := range r.Resources {
				// The one exception: the controller's webhook certificate
				// Secret, by name (create cannot be limited to a name).
				webhookTLS := o.GetKind() == "Role" && o.GetName() == webhookTLSSecret && res == "secrets" &&
					(slices.Equal(r.Verbs, []string{"create"}) && len(r.ResourceNames) == 0 ||
						slices.Equal(r.ResourceNames, []string{webhookTLSSecret}) && slices.Equal(r.Verbs, []string{"get", "update"}))
				if (res == "secrets" || strings.HasPrefix(res, "secrets/")) && !webhookTLS {
					t.Errorf("%s rule %d grants access to %s", objKey(o), i, res)
				}
			}
		}
	}
	agent := rulesOf(t, objs, "ClusterRole", agentSA)
	for _, verb := range []string{"delete", "deletecollection", "create", "update", "patch"} {
		if grants(agent, "", "pods", verb) {
			t.Errorf("agent ClusterRole can %s pods", verb)
		}
	}
	controller := rulesOf(t, objs, "ClusterRole", controllerSA)
	for _, verb := range []string{"get", "list", "watch"} {
		if grants(controller, "", "secrets", verb) {
			t.Errorf("controller ClusterRole can %s secrets", verb)
		}
	}
	for _, sa := range []string{agentSA, controllerSA} {
		crb := typed[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", sa))
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != sa {
			t.Errorf("ClusterRoleBinding %s binds %s %s", sa, crb.RoleRef.Kind, crb.RoleRef.Name)
		}
		if len(crb.Subjects) != 1 || crb.Subjects[0].Kind != "ServiceAccount" || crb.Subjects[0].Name != sa || crb.Subjects[0].Namespace != namespace {
			t.Errorf("ClusterRoleBinding %s subjects %+v", sa, crb.Subjects)
		}
		find(t, objs, "ServiceAccount", sa)
	}
}

type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += " named " + a.name
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	return s
}

func named(name string, as []access) []access {
	for i := range as {
		as[i].name = name
	}
	return as
}

func cluster(verbs []string, group, resource string) []access {
	var out []access
	for _, v := range verbs {
		r, sub, _ := strings.Cut(resource, "/")
		out = append(out, access{verb: v, group: group, resource: r, subresource: sub})
	}
	return out
}

func inNamespace(ns string, as []access) []access {
	for i := range as {
		as[i].namespace = ns
	}
	return as
}

var read = []string{"get", "list", "watch"}

// TestRBACAuthorizer applies the build's RBAC to the API server and asks its
// authorizer (SubjectAccessReview) about each service account: everything
// the agent and the controller do is allowed, and a list of things they
// must not do is denied.
func TestRBACAuthorizer(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := adminClient(t)
	objs := kustomizeBuild(t)
	applyRBAC(t, ctx, c, objs)

	const tenure, claims = "ipam.tenure.dev", "k8s.cni.cncf.io"
	cases := []struct {
		sa          string
		allow, deny []access
	}{{
		sa: agentSA,
		allow: slices.Concat(
			cluster(read, "", "pods"),
			cluster([]string{"get", "list", "watch", "create", "delete"}, tenure, "ipreservations"),
			cluster(read, tenure, "ippools"),
			cluster([]string{"get", "list", "watch", "create"}, claims, "ipamclaims"), // create: sticky StatefulSet claims
			cluster([]string{"update"}, claims, "ipamclaims/status"),
			inNamespace("default", cluster([]string{"create", "patch"}, "", "events")),
			// Where KubeVirt's VMs run (internal/kubevirt): its VMIs, and the one CRD that says they are served.
			cluster(read, "kubevirt.io", "virtualmachineinstances"),
			named("virtualmachineinstances.kubevirt.io", cluster(read, "apiextensions.k8s.io", "customresourcedefinitions")),
		),
		deny: slices.Concat(
			cluster([]string{"create", "update", "patch", "delete"}, "kubevirt.io", "virtualmachineinstances"),
			cluster(read, "kubevirt.io", "virtualmachines"),
			cluster([]string{"list", "watch"}, "apiextensions.k8s.io", "customresourcedefinitions"),
			named("ipamclaims.k8s.cni.cncf.io", cluster(read, "apiextensions.k8s.io", "customresourcedefinitions")),
			named("virtualmachineinstances.kubevirt.io", cluster([]string{"update", "patch", "delete"}, "apiextensions.k8s.io", "customresourcedefinitions")),
			cluster([]string{"create", "update", "patch", "delete", "deletecollection"}, "", "pods"),
			cluster([]string{"update"}, "", "pods/status"),
			cluster([]string{"create"}, "", "pods/exec"),
			cluster(read, "", "secrets"),
			inNamespace(namespace, cluster(read, "", "secrets")),
			cluster(read, "", "configmaps"),
			cluster([]string{"update", "patch", "deletecollection"}, tenure, "ipreservations"),
			cluster([]string{"create", "update", "delete"}, tenure, "ippools"),
			cluster([]string{"update"}, tenure, "ippools/status"),
			cluster([]string{"update", "patch", "delete"}, claims, "ipamclaims"),
			cluster([]string{"update", "delete"}, "", "nodes"),
			inNamespace(namespace, cluster([]string{"get", "update"}, "coordination.k8s.io", "leases")),
			cluster([]string{"create", "update"}, "rbac.authorization.k8s.io", "clusterrolebindings"),
			cluster([]string{"update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
			cluster([]string{"update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingadmissionpolicies"),
			cluster([]string{"update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
		),
	}, {
		sa: controllerSA,
		allow: slices.Concat(
			cluster(read, "", "pods"),
			cluster(read, "", "nodes"),
			cluster([]string{"get", "list", "watch", "delete"}, tenure, "ipreservations"),
			cluster([]string{"get", "list", "watch", "patch", "delete"}, claims, "ipamclaims"), // delete: sticky StatefulSet claims
			cluster(read, "apps", "statefulsets"),
			cluster(read, tenure, "ippools"),
			cluster([]string{"update"}, tenure, "ippools/status"),
			inNamespace("default", cluster([]string{"create", "patch"}, "", "events")),
			inNamespace(namespace, cluster([]string{"create"}, "coordination.k8s.io", "leases")),
			named(leaseName, inNamespace(namespace, cluster([]string{"get", "update"}, "coordination.k8s.io", "leases"))),
			// The agent node-restriction webhook: where a claim's VM runs,
			// its certificate Secret, its configuration's caBundle.
			cluster([]string{"get"}, "kubevirt.io", "virtualmachineinstances"),
			inNamespace(namespace, cluster([]string{"create"}, "", "secrets")),
			named(webhookTLSSecret, inNamespace(namespace, cluster([]string{"get", "update"}, "", "secrets"))),
			named("tenure-agent-node-restriction", cluster([]string{"get", "patch"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations")),
		),
		deny: slices.Concat(
			named("someone-else", inNamespace(namespace, cluster([]string{"get", "update", "delete"}, "", "secrets"))),
			named(webhookTLSSecret, inNamespace(namespace, cluster([]string{"delete", "list"}, "", "secrets"))),
			inNamespace("kube-system", cluster([]string{"create"}, "", "secrets")),
			named("someone-else", cluster([]string{"get", "update", "patch"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations")),
			cluster([]string{"list", "create", "delete"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
			named("tenure-agent-node-restriction", cluster([]string{"update", "delete"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations")),
			cluster([]string{"create", "update", "patch", "delete"}, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
			// The API server applies no admission policy to these: RBAC alone keeps them.
			cluster([]string{"create", "update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingadmissionpolicies"),
			cluster([]string{"create", "update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
			cluster([]string{"update"}, claims, "ipamclaims"),
			cluster([]string{"patch"}, tenure, "ippools/status"),
			cluster([]string{"list", "watch", "update"}, "kubevirt.io", "virtualmachineinstances"),
			cluster(read, "", "secrets"),
			inNamespace(namespace, cluster(read, "", "secrets")),
			inNamespace("kube-system", cluster(read, "", "secrets")),
			cluster(read, "", "configmaps"),
			cluster([]string{"create", "update", "patch", "delete"}, "", "pods"),
			cluster([]string{"update", "patch", "delete"}, "", "nodes"),
			cluster([]string{"create", "update", "patch", "deletecollection"}, tenure, "ipreservations"),
			cluster([]string{"update"}, claims, "ipamclaims/status"),
			cluster([]string{"create"}, claims, "ipamclaims"),
			cluster([]string{"create", "update", "patch", "delete"}, "apps", "statefulsets"),
			cluster([]string{"create", "update", "delete"}, tenure, "ippools"),
			named(leaseName, inNamespace("kube-system", cluster([]string{"get", "update"}, "coordination.k8s.io", "leases"))),
			named("someone-else", inNamespace(namespace, cluster([]string{"get", "update"}, "coordination.k8s.io", "leases"))),
			named(leaseName, inNamespace(namespace, cluster([]string{"delete", "patch"}, "coordination.k8s.io", "leases"))),
			cluster([]string{"create", "update"}, "rbac.authorization.k8s.io", "clusterrolebindings"),
		),
	}}
	for _, tc := range cases {
		user, groups := serviceAccountUser(tc.sa)
		ask := func(a access) (bool, string) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Name: a.name,
				},
			}}
			if err := c.Create(ctx, sar); err != nil {
				t.Fatalf("SubjectAccessReview: %v", err)
			}
			return sar.Status.Allowed, sar.Status.Reason
		}
		for _, a := range tc.allow {
			if ok, reason := ask(a); !ok {
				t.Errorf("%s cannot %s (%s)", tc.sa, a, reason)
			}
		}
		for _, a := range tc.deny {
			if ok, reason := ask(a); ok {
				t.Errorf("%s can %s (%s)", tc.sa, a, reason)
			}
		}
		t.Logf("%s: %d allowed and %d denied accesses as expected", tc.sa, len(tc.allow), len(tc.deny))
	}
}
