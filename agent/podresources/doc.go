// Package podresources reads the devices the kubelet allocated to a pod
// from the kubelet's pod-resources API (v1, a gRPC service on a unix
// socket, by default /var/lib/kubelet/pod-resources/kubelet.sock), as
// Multus does to pass a NetworkAttachmentDefinition's resourceName device
// as deviceID. Only the agent links it (grpc stays out of cnibox), and only its
// Kubernetes build: the client is tagged !nokube, so that the etcd-only
// agent (tag nokube) names the default socket in its flags without
// linking the kubelet's API.
package podresources

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
