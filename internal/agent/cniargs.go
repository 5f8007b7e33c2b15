package agent

import (
	"fmt"
	"strings"
)

// podArgs are the Kubernetes keys runtimes put in CNI_ARGS.
type podArgs struct {
	Namespace, Name, UID, InfraContainerID string
}

func parseCNIArgs(s string) (podArgs, error) {
	var a podArgs
	if s == "" {
		return a, fmt.Errorf("CNI_ARGS is empty: K8S_POD_NAMESPACE and K8S_POD_NAME are required")
	}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return a, fmt.Errorf("CNI_ARGS: %q is not KEY=VALUE", kv)
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		case "K8S_POD_NAME":
			a.Name = v
		case "K8S_POD_UID":
			a.UID = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraContainerID = v
		}
	}
	if a.Namespace == "" || a.Name == "" {
		return a, fmt.Errorf("CNI_ARGS %q: K8S_POD_NAMESPACE and K8S_POD_NAME are required", s)
	}
	return a, nil
}
