package agentapi

import "context"

// The Multus parts of the protocol: Multus' annotations, the devices the
// kubelet gave a pod (for a NAD's resourceName), and events on the pod.

// More annotations Multus reads.
const (
	// DefaultNetworkAnnotation replaces a pod's primary network
	// (v1.multus-cni.io/default-network: a NAD in Multus' namespace).
	DefaultNetworkAnnotation = "v1.multus-cni.io/default-network"
	// ResourceNameAnnotation on a NetworkAttachmentDefinition names the
	// device plugin resource (e.g. intel.com/sriov) whose device the pod
	// got for this network.
	ResourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"
)

// More operations of a Request.
const (
	// OpPodDevices returns the devices the kubelet allocated to the pod's
	// containers, by resource name (Response.Devices), from the kubelet's
	// pod-resources API.
	OpPodDevices = "pod-devices"
	// OpEvents records Request.Events on the pod (best effort).
	OpEvents = "events"
)

// Event is a Kubernetes event on a pod, as Multus records them
// (type Normal, reason AddedInterface).
type Event struct {
	Type    string `json:"type"` // Normal or Warning
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// PodDevices returns the device IDs the kubelet allocated to the pod, by
// resource name, each list sorted (as Multus sorts them).
func (c *Client) PodDevices(ctx context.Context, namespace, name, uid string) (map[string][]string, error) {
	resp, err := c.Do(ctx, Request{Op: OpPodDevices, Namespace: namespace, Name: name, UID: uid})
	if err != nil {
		return nil, err
	}
	return resp.Devices, nil
}

// Events records events on the pod.
func (c *Client) Events(ctx context.Context, namespace, name, uid string, events []Event) error {
	_, err := c.Do(ctx, Request{Op: OpEvents, Namespace: namespace, Name: name, UID: uid, Events: events})
	return err
}
