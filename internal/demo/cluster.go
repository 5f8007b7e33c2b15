package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyManifests creates every object of every YAML file in fsys (multi-
// document files allowed); objects that exist are left alone.
func ApplyManifests(ctx context.Context, c client.Client, fsys fs.FS) (int, error) {
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
			if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: %s %s: %w", path, u.GetKind(), u.GetName(), err)
			}
			n++
		}
	})
	return n, err
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as a
// service account through a TokenRequest, so a component run as a local
// process has exactly the rights its RBAC in deploy/ gives it.
func ServiceAccountKubeconfig(ctx context.Context, admin *rest.Config, namespace, name, path string) error {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.TLSClientConfig.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
