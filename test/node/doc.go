// Package node is the real-node test (make test-node, which make test-kube
// runs): a one-node Kubernetes cluster with a real kubelet and containerd
// (test/kube/node.sh, all of it in private namespaces), cnibox's image
// (make image) imported into that containerd, and its manifest applied with
// kubectl, with only the CNI host paths pointed at the node's directories.
// Then it checks what a user would: the node turns Ready once the DaemonSet
// installed the plugins; podCIDR and subnet.env agree; pods get addresses
// in the podCIDR and reach each other; a pod naming a
// NetworkAttachmentDefinition gets its second interface and the
// network-status annotation; deleting pods releases their addresses; a
// rollout of a new image keeps running pods reachable; and `kubectl delete
// -f` leaves the node's running pods alone. docs/deploy.md says how to run
// it and what it costs.
//
// The test needs root and the build tag kube; the Makefile passes the
// Kubernetes binaries, the image archive and the rendered manifest in
// CNIBOX_KUBE_BIN, CNIBOX_IMAGE_TAR and CNIBOX_MANIFEST.
package node
