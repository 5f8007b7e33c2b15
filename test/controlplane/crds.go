package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/tenure-ipam/tenure/test/progress"
)

const (
	crdTimeout = 60 * time.Second
	// The API server delays the first create of a custom object made less
	// than this long after its CRD became Established (apiextensions
	// customresource_handler.go).
	crdJustCreated = 2 * time.Second
)

//go:embed multus/*.yaml
var multus embed.FS

// MultusCRDs holds the CRD Multus reads NetworkAttachmentDefinitions
// through, for InstallCRDs.
func MultusCRDs() fs.FS {
	sub, err := fs.Sub(multus, "multus")
	if err != nil {
		panic(err) // the directory is embedded
	}
	return sub
}

// InstallCRDs applies every *.yaml (and *.yml) file under the root of files,
// subdirectories included, as apiextensions.k8s.io/v1
// CustomResourceDefinitions: created, or updated when they exist. It returns
// once each is Established, a List of each served version succeeds, and the
// API server's "just created" window has passed, so the first create of a
// custom object is neither delayed nor refused.
//
// Use fs.Sub(deploy.CRDs, "crds") for tenure's own CRDs.
func InstallCRDs(ctx context.Context, cfg *rest.Config, files fs.FS) error {
	crds, err := ReadCRDs(files)
	if err != nil {
		return err
	}
	if len(crds) == 0 {
		return errors.New("controlplane: no CustomResourceDefinitions found")
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, crdTimeout)
		defer cancel()
	}

	for _, crd := range crds {
		if err := applyCRD(ctx, cs, crd); err != nil {
			return err
		}
	}

	// Wait for Established; note when it happened.
	var settled time.Time // when the last CRD's just-created window ends
	for _, crd := range crds {
		var established *apiextensionsv1.CustomResourceDefinitionCondition
		progress.Waiting(ctx, "CRD "+crd.Name+" to be Established")
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				progress.Observe(ctx, err.Error())
				return false, nil
			}
			for i, c := range got.Status.Conditions {
				switch {
				case c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse:
					return false, fmt.Errorf("controlplane: CRD %s: names not accepted: %s: %s", crd.Name, c.Reason, c.Message)
				case c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue:
					established = &got.Status.Conditions[i]
					return true, nil
				}
			}
			progress.Observe(ctx, "no Established=True condition yet")
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("controlplane: waiting for CRD %s to be Established: %w", crd.Name, err)
		}
		progress.Done(ctx)
		// The serialized transition time is truncated to the second; the
		// server compares against the exact one, which is at most a second
		// later and not later than now.
		at := established.LastTransitionTime.Add(time.Second)
		if now := time.Now(); at.After(now) {
			at = now
		}
		if end := at.Add(crdJustCreated); end.After(settled) {
			settled = end
		}
	}

	// Right after Established a list can get 429 "storage is
	// (re)initializing"; make sure every served version answers.
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			var last error
			progress.Waiting(ctx, gvr.String()+" to be served")
			err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				_, last = dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				if last != nil {
					progress.Observe(ctx, last.Error())
				}
				return last == nil, nil
			})
			if err != nil {
				return fmt.Errorf("controlplane: listing %s: %w (last error: %v)", gvr, err, last)
			}
			progress.Done(ctx)
		}
	}

	if left := time.Until(settled); left > 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ReadCRDs parses every *.yaml / *.yml file under the root of files
// (subdirectories included, in lexical order) as CustomResourceDefinitions;
// a file may hold several documents. Fields unknown to
// apiextensions.k8s.io/v1 are an error.
func ReadCRDs(files fs.FS) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if ext := path.Ext(name); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		data, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("controlplane: %s: %w", name, err)
			}
			j, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return fmt.Errorf("controlplane: %s document %d: %w", name, i, err)
			}
			if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
				continue // empty document or only comments
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return fmt.Errorf("controlplane: %s document %d: %w", name, i, err)
			}
			if crd.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || crd.Kind != "CustomResourceDefinition" {
				return fmt.Errorf("controlplane: %s document %d is a %s %s, not an %s CustomResourceDefinition",
					name, i, crd.APIVersion, crd.Kind, apiextensionsv1.SchemeGroupVersion)
			}
			crds = append(crds, crd)
		}
	})
	if err != nil {
		return nil, err
	}
	return crds, nil
}

func applyCRD(ctx context.Context, cs apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	progress.Waiting(ctx, "the API server to create or update CRD "+crd.Name)
	client := cs.ApiextensionsV1().CustomResourceDefinitions()
	_, err := client.Create(ctx, crd.DeepCopy(), metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("controlplane: creating CRD %s: %w", crd.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		existing.Labels = crd.Labels
		existing.Annotations = crd.Annotations
		existing.Spec = crd.Spec
		_, err = client.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("controlplane: updating CRD %s: %w", crd.Name, err)
	}
	return nil
}
