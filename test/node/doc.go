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
// startCluster starts a cluster of N kubelet nodes, each in its own
// namespaces, on one control plane whose namespace is also their underlay
// (node.sh cluster and join): the nodes' CNI dirs are at the usual host
// paths in their mount namespaces, so manifests apply unchanged, and the
// kubernetes Service's address is routed to the API server. On it,
// TestKubeNodeFlannel runs flannel's own kube-flannel.yml v0.28.9 with a
// real flanneld (built from the module proxy, cached by version), moves the
// DaemonSet to cnibox's image with `kubectl set image` while pods on
// different nodes ping each other, and back; TestKubeNodeCluster runs
// cnibox's manifest on three nodes: an agent restarted, a node deleted, a
// node whose FORWARD policy is DROP; TestKubeNodeMultusOverBridge runs
// cnibox-multus.yaml over a node whose network is the reference bridge: a
// pod with a macvlan and a host-device secondary, then `kubectl delete -f`
// gives the node its bridge back and leaves the NADs;
// TestKubeNodeFlannelHelm is TestKubeNodeFlannel with flannel's own Helm
// chart (helm install, helm upgrade of its image values to cnibox's image
// and back).
//
// TestKubeNodeHelm installs cnibox's chart (deploy/helm/cnibox) on the
// one-node cluster with a real helm: the node turns Ready, pods talk, helm
// upgrade and helm rollback keep pings answered, helm uninstall leaves the
// CRDs and the running pods.
//
// TestKubeNodeKind runs kind's network (ptp + host-local + portmap,
// cniVersion 0.3.1) on the same private node with containerd alone
// (node.sh cri), driven through the CRI's Go client: sandboxes get
// addresses, /32 routes, pod-to-pod and a hostPort, and stop and remove
// leave no route, veth, portmap element or store record. docs/deploy.md
// says how to run them and what they cost.
//
// TestKubeConformance (make test-conformance) runs Kubernetes' own
// [sig-network] e2e specs on three such nodes with kube-proxy and CoreDNS,
// on flannel with the reference plugins or on cnibox ($CNIBOX_CONFORMANCE;
// docs/conformance.md). TestKubeCNPConformance (make test-cnp) runs
// network-policy-api's ClusterNetworkPolicy conformance profile on them;
// TestKubeMNPE2E (make test-mnp) runs the MultiNetworkPolicy e2e traffic
// tests of k8snetworkplumbingwg/multi-networkpolicy-iptables (bats) on one
// such node, with Multus-style secondary networks (multi) and macvlan NADs.
//
// The test needs root and the build tag kube; the Makefile passes the
// Kubernetes binaries, the image archive and the rendered manifest in
// CNIBOX_KUBE_BIN, CNIBOX_IMAGE_TAR, CNIBOX_MANIFEST and
// CNIBOX_MULTUS_MANIFEST, and helm (deploy/helm/helm.sh) in CNIBOX_HELM.
package node
