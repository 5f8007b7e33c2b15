// Package claims finds the IPAMClaim an attachment presents and keeps the
// claim's status in step with the reservations it owns.
package claims

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	corev1 "k8s.io/api/core/v1"
)

// PrefixDelegationAnnotation lets a pod without a claim opt in to a
// delegated prefix: "true" or "*" for every attachment, or a comma-separated
// list of interface names. The network-selection element's cni-args key
// PrefixDelegationArg does the same for one attachment.
const (
	PrefixDelegationAnnotation = "ipam.tenure.dev/prefix-delegation"
	PrefixDelegationArg        = "tenure.dev/prefix-delegation"
)

// Selection is what the pod's networks annotation says about one attachment.
type Selection struct {
	// Element is the network-selection element of the attachment, nil when
	// the pod's annotation has none for this interface.
	Element *nadv1.NetworkSelectionElement
	// Claim is the IPAMClaim name, "" when the attachment presents none.
	Claim string
	// WantsPrefix: the pod opted in to a delegated prefix without a claim.
	WantsPrefix bool
}

// Select finds the element of the pod's k8s.v1.cni.cncf.io/networks
// annotation that produced interface ifName. Multus names interfaces it was
// not told to name net1, net2, ... in annotation order, so an element
// matches by its interface request or by that position.
func Select(pod *corev1.Pod, ifName string) (Selection, error) {
	var sel Selection
	if pod.Annotations[nadv1.NetworkAttachmentAnnot] != "" {
		elems, err := Networks(pod)
		if err != nil {
			return sel, fmt.Errorf("pod %s/%s: annotation %s is malformed: %v", pod.Namespace, pod.Name, nadv1.NetworkAttachmentAnnot, err)
		}
		for i, e := range elems {
			name := e.InterfaceRequest
			if name == "" {
				name = "net" + strconv.Itoa(i+1)
			}
			if name == ifName {
				sel.Element = e
				sel.Claim = e.IPAMClaimReference
				break
			}
		}
	}
	if sel.Element != nil && sel.Element.CNIArgs != nil {
		if v, ok := (*sel.Element.CNIArgs)[PrefixDelegationArg]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return sel, fmt.Errorf("pod %s/%s: cni-args %q of network %s must be a boolean, got %v", pod.Namespace, pod.Name, PrefixDelegationArg, sel.Element.Name, v)
			}
			sel.WantsPrefix = b
		}
	}
	if v, ok := pod.Annotations[PrefixDelegationAnnotation]; ok {
		switch strings.TrimSpace(v) {
		case "true", "*":
			sel.WantsPrefix = true
		case "false", "":
		default:
			for _, n := range strings.Split(v, ",") {
				if strings.TrimSpace(n) == ifName {
					sel.WantsPrefix = true
				}
			}
		}
	}
	return sel, nil
}

// Networks parses the pod's k8s.v1.cni.cncf.io/networks annotation (which
// must be set) as Multus reads it. A null element ("[null]") is refused:
// the library dereferences every element and would panic on it.
func Networks(pod *corev1.Pod) ([]*nadv1.NetworkSelectionElement, error) {
	var raw []json.RawMessage
	if json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkAttachmentAnnot]), &raw) == nil {
		for i, r := range raw {
			if bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
				return nil, fmt.Errorf("element %d is null, not a network selection element", i)
			}
		}
	}
	return nadutils.ParsePodNetworkAnnotation(pod)
}
