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
// -f` leaves the node's running pods alone.
//
// TestKubeNodeKind runs kind's network (ptp + host-local + portmap,
// cniVersion 0.3.1) on the same private node with containerd alone
// (node.sh cri), driven through the CRI's Go client: sandboxes get
// addresses, /32 routes, pod-to-pod and a hostPort, and stop and remove
// leave no route, veth, portmap element or store record. docs/deploy.md
// says how to run both and what they cost.
//
// The test needs root and the build tag kube; the Makefile passes the
// Kubernetes binaries, the image archive and the rendered manifest in
// CNIBOX_KUBE_BIN, CNIBOX_IMAGE_TAR and CNIBOX_MANIFEST.
package node
