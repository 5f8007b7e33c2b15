package agent

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// podArgs are the Kubernetes keys runtimes put in CNI_ARGS.
type podArgs struct {
	Namespace, Name, UID, InfraContainerID string
}

// k8sArgs is CNI_ARGS as types.LoadArgs fills it: one field per key,
// named as the key is.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_UID                types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
}

func parseCNIArgs(s string) (podArgs, error) {
	if s == "" {
		return podArgs{}, fmt.Errorf("CNI_ARGS is empty: K8S_POD_NAMESPACE and K8S_POD_NAME are required")
	}
	a, err := loadArgs(s)
	if err != nil {
		return podArgs{}, err
	}
	if a.Namespace == "" || a.Name == "" {
		return a, fmt.Errorf("CNI_ARGS %q: K8S_POD_NAMESPACE and K8S_POD_NAME are required", s)
	}
	return a, nil
}

// loadArgs is CNI_ARGS read by types.LoadArgs, which refuses a malformed
// pair and, when the caller says IgnoreUnknown=false, an unknown key.
func loadArgs(s string) (podArgs, error) {
	// Keys other runtimes or meta-plugins add are none of ours: ignore them
	// unless the caller says IgnoreUnknown=false.
	args := k8sArgs{CommonArgs: types.CommonArgs{IgnoreUnknown: true}}
	if err := types.LoadArgs(s, &args); err != nil {
		return podArgs{}, fmt.Errorf("CNI_ARGS %q: %w", s, err)
	}
	return podArgs{
		Namespace: string(args.K8S_POD_NAMESPACE), Name: string(args.K8S_POD_NAME),
		UID: string(args.K8S_POD_UID), InfraContainerID: string(args.K8S_POD_INFRA_CONTAINER_ID),
	}, nil
}
