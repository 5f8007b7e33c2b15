// Command crdnames completes the CRDs controller-gen makes of the
// kubevirt.io/api module's core/v1 types with what virt-operator adds when
// it serves them (pkg/virt-operator/resource/generate/components/crds.go in
// github.com/kubevirt/kubevirt: NewVirtualMachineInstanceCrd and
// NewVirtualMachineCrd): the short names and the category "all", and the
// status subresource of the VirtualMachine. The VirtualMachineInstance gets
// none: virt-controller and virt-handler update the whole object.
//
// Usage: crdnames HEADER IN OUT, where IN is a controller-gen CRD file and
// HEADER a file of comment lines written above the result.
package main

import (
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

type names struct {
	short        []string
	statusSubres bool
}

var served = map[string]names{
	"virtualmachineinstances.kubevirt.io": {short: []string{"vmi", "vmis"}},
	"virtualmachines.kubevirt.io":         {short: []string{"vm", "vms"}, statusSubres: true},
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: crdnames HEADER IN OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "crdnames:", err)
		os.Exit(1)
	}
}

func run(headerFile, in, out string) error {
	header, err := os.ReadFile(headerFile)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var crd extv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	n, ok := served[crd.Name]
	if !ok {
		return fmt.Errorf("%s: CRD %s is not one crdnames completes", in, crd.Name)
	}
	crd.Spec.Names.ShortNames = n.short
	crd.Spec.Names.Categories = []string{"all"}
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Subresources = nil
		if n.statusSubres {
			crd.Spec.Versions[i].Subresources = &extv1.CustomResourceSubresources{Status: &extv1.CustomResourceSubresourceStatus{}}
		}
	}
	delete(crd.Annotations, "controller-gen.kubebuilder.io/version")
	crd.Status = extv1.CustomResourceDefinitionStatus{}
	y, err := yaml.Marshal(&crd)
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(header, y...), 0o644)
}
