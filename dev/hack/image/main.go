// Command image writes the tenure image, as the Dockerfile would build it,
// into an OCI tarball without docker (`make image`): import it with
// `ctr -n k8s.io images import FILE`, or push it with `crane push FILE REF`.
//
//	go run ./hack/image --bin DIR [--out bin/tenure-image.tar]
//
// DIR holds the binaries built from ./cmd/... (the Makefile builds them with
// the release tags and flags). The image's name is the tag deploy/'s
// kustomization pins, so the manifests find it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/tenure-ipam/tenure/dev/image"
)

func main() {
	binDir := flag.String("bin", "", "directory of the binaries built from ./cmd/... (required)")
	out := flag.String("out", "bin/tenure-image.tar", "the OCI tarball to write")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to put in the image")
	kustomization := flag.String("kustomization", "deploy/kustomization.yaml", "the kustomization whose images entry names the image")
	ref := flag.String("ref", "", "the image's name (default: the one the kustomization pins)")
	flag.Parse()
	if *binDir == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*binDir, *out, *caBundle, *kustomization, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binDir, out, caBundle, kustomization, ref string) error {
	var tag name.Tag
	var err error
	if ref != "" {
		tag, err = name.NewTag(ref, name.StrictValidation)
	} else {
		tag, err = image.DeployedTag(kustomization, image.TenureRepository)
	}
	if err != nil {
		return err
	}
	spec, err := image.Tenure(binDir, caBundle)
	if err != nil {
		return err
	}
	img, err := image.Build(spec)
	if err != nil {
		return err
	}
	if err := image.WriteFile(out, tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", out, tag.Name(), digest)
	return nil
}
