package bench

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBeforeDaemonSetRunsTheOldAgentOnItsOwnSocketBesideDeploys: the copy
// keeps the agent's identity and environment, runs the old binary from the
// host on its own socket, and takes nothing deploy/'s agent holds on the
// node (its name and labels, the metrics port, the shim's install).
func TestBeforeDaemonSetRunsTheOldAgentOnItsOwnSocketBesideDeploys(t *testing.T) {
	cur := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenure-system", Name: "tenure-agent"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "tenure-agent"}},
			Spec: corev1.PodSpec{
				ServiceAccountName: "tenure-agent", HostNetwork: true,
				InitContainers: []corev1.Container{{Name: "install"}},
				Containers: []corev1.Container{{Name: "agent", Image: "tenure:new", Command: []string{"/usr/local/bin/tenure-agent"},
					Args:          []string{"--node-name=$(NODE_NAME)", "--socket=/run/tenure/agent.sock", "--metrics-addr=:9467"},
					Env:           []corev1.EnvVar{{Name: "NODE_NAME"}},
					Ports:         []corev1.ContainerPort{{ContainerPort: 9467}},
					LivenessProbe: &corev1.Probe{}, VolumeMounts: []corev1.VolumeMount{{Name: "run", MountPath: "/run/tenure"}}}},
				Volumes: []corev1.Volume{{Name: "run"}},
			},
		}},
	}
	ds, err := beforeDaemonSetFrom(cur, "/old/bin")
	if err != nil {
		t.Fatal(err)
	}
	if ds.Name != beforeDaemonSet || ds.Namespace != "tenure-system" || ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != beforeDaemonSet ||
		ds.Spec.Template.Labels["app.kubernetes.io/name"] != beforeDaemonSet {
		t.Errorf("name and labels: %s/%s, selector %v, template %v", ds.Namespace, ds.Name, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "tenure-agent" || !spec.HostNetwork || len(spec.InitContainers) != 0 {
		t.Errorf("pod: service account %q, host network %v, init containers %v", spec.ServiceAccountName, spec.HostNetwork, spec.InitContainers)
	}
	a := spec.Containers[0]
	if strings.Join(a.Command, " ") != "/tenure-before/tenure-agent" || strings.Join(a.Args, " ") != "--node-name=$(NODE_NAME) --socket=/run/tenure/before.sock" {
		t.Errorf("agent: %v %v", a.Command, a.Args)
	}
	if len(a.Ports) != 0 || a.LivenessProbe != nil || a.ReadinessProbe == nil || !strings.Contains(strings.Join(a.ReadinessProbe.Exec.Command, " "), "--socket=/run/tenure/before.sock --ready") {
		t.Errorf("agent: ports %v, liveness %v, readiness %v", a.Ports, a.LivenessProbe, a.ReadinessProbe)
	}
	if len(a.Env) != 1 || a.Env[0].Name != "NODE_NAME" {
		t.Errorf("agent env: %v", a.Env)
	}
	var mounted, hostDir bool
	for _, m := range a.VolumeMounts {
		mounted = mounted || (m.Name == "tenure-before" && m.MountPath == beforeBinMount && m.ReadOnly)
	}
	for _, v := range spec.Volumes {
		hostDir = hostDir || (v.Name == "tenure-before" && v.HostPath != nil && v.HostPath.Path == "/old/bin")
	}
	if !mounted || !hostDir {
		t.Errorf("the old binaries: mounted %v, from the host's /old/bin %v (%v, %v)", mounted, hostDir, a.VolumeMounts, spec.Volumes)
	}
	// deploy/'s DaemonSet is left as it was.
	if cur.Spec.Template.Spec.Containers[0].Args[1] != "--socket=/run/tenure/agent.sock" || len(cur.Spec.Template.Spec.InitContainers) != 1 || len(cur.Spec.Template.Spec.Volumes) != 1 {
		t.Errorf("deploy/'s DaemonSet changed: %+v", cur.Spec.Template.Spec)
	}
	cur.Spec.Template.Spec.Containers[0].Name = "other"
	if _, err := beforeDaemonSetFrom(cur, "/old/bin"); err == nil || !strings.Contains(err.Error(), "no container named agent") {
		t.Errorf("no agent container: %v", err)
	}
}
