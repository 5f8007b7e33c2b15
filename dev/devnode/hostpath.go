package devnode

// HostPath is where host path p (one of the paths a node keeps private,
// such as HostCNIBinDir) lies as seen from the host: the node's own
// directory for it when the node runs in namespaces of its own, p itself
// for a node on the host.
func (node *Node) HostPath(p string) string { return node.layout.hostPath(p) }
