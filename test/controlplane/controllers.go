package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

const (
	controllerManagerName = "kube-controller-manager"
	schedulerName         = "kube-scheduler"

	controllersReadyTimeout = 90 * time.Second

	// NodeMonitorGracePeriod is how long a node may go without reporting
	// before the controller-manager marks it NotReady (Kubernetes' default
	// is 50 s): a local cluster's tests of a lost node wait this long.
	NodeMonitorGracePeriod = 20 * time.Second
)

// startControllers runs kube-controller-manager and kube-scheduler against
// the API server with the admin kubeconfig, and waits until both answer
// /healthz and the controllers that every pod needs have done their work in
// "default": its ServiceAccount exists (serviceaccount controller) and so
// does the kube-root-ca.crt ConfigMap that projected token volumes mount
// (root-ca-cert-publisher). Both serve only on 127.0.0.1.
func (cp *ControlPlane) startControllers(ctx context.Context, opts Options, pkiDir string) error {
	cmBin, err := resolveBinary(opts.BinDir, controllerManagerName)
	if err != nil {
		return fmt.Errorf("%w (hack/build-node.sh builds it)", err)
	}
	schedBin, err := resolveBinary(opts.BinDir, schedulerName)
	if err != nil {
		return fmt.Errorf("%w (hack/build-node.sh builds it)", err)
	}
	common := []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	cm := &proc{Name: controllerManagerName, Binary: cmBin, Args: append(append([]string{}, common...),
		"--secure-port="+strconv.Itoa(cp.ports.ControllerManager),
		"--cert-dir="+filepath.Join(cp.Dir, "controller-manager-pki"),
		"--service-account-private-key-file="+filepath.Join(pkiDir, "sa.key"),
		"--root-ca-file="+filepath.Join(pkiDir, "ca.crt"),
		// The admin credential for every controller: one identity is
		// enough on a cluster of one user.
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period="+NodeMonitorGracePeriod.String(),
		"--node-monitor-period=2s",
		"--concurrent-deployment-syncs=2",
	)}
	sched := &proc{Name: schedulerName, Binary: schedBin, Args: append(append([]string{}, common...),
		"--secure-port="+strconv.Itoa(cp.ports.Scheduler),
		"--cert-dir="+filepath.Join(cp.Dir, "scheduler-pki"),
	)}
	// Their serving certificates are self-signed, made at start; /healthz
	// is all that is read from them, on loopback.
	health := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer health.CloseIdleConnections()
	for _, p := range []*proc{cm, sched} {
		if err := cp.spawn(p, opts); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		p    *proc
		port int
	}{{cm, cp.ports.ControllerManager}, {sched, cp.ports.Scheduler}} {
		url := "https://127.0.0.1:" + strconv.Itoa(c.port) + "/healthz"
		if err := waitReady(ctx, c.p, controllersReadyTimeout, func(ctx context.Context) error {
			return getOK(ctx, health, url, "ok")
		}); err != nil {
			return err
		}
	}
	hc, err := cp.httpClient()
	if err != nil {
		return err
	}
	for _, obj := range []string{"serviceaccounts/default", "configmaps/kube-root-ca.crt"} {
		if err := waitReady(ctx, cm, controllersReadyTimeout, func(ctx context.Context) error {
			return getOK(ctx, hc, cp.URL+"/api/v1/namespaces/default/"+obj, "")
		}); err != nil {
			return err
		}
	}
	return nil
}
