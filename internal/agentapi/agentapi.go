// Package agentapi is the protocol between cnibox (the multi role) and the
// pod API of cnibox-agent on a unix socket (default /run/cnibox/agent.sock):
// per connection, one JSON request line and one JSON response line. The
// agent watches the pods of its node with client-go (Multus' "thick"
// design); cnibox, which runtimes exec on every CNI call, reaches the
// Kubernetes API only through it and links nothing but the standard
// library's net and encoding/json for it.
//
// The server, which links client-go, is agent/podapi; only
// cmd/cnibox-agent imports it.
package agentapi

import (
	"encoding/json"
	"errors"
	"fmt"
)

// DefaultSocket is where cnibox-agent serves the pod API unless --socket
// says otherwise, and where the multi role looks for it unless
// "agentSocket" says otherwise.
const DefaultSocket = "/run/cnibox/agent.sock"

// The pod annotations of the Kubernetes Network Plumbing Working Group's
// multi-network specification (the ones Multus reads and writes).
const (
	// NetworksAnnotation selects a pod's additional networks.
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// NetworkStatusAnnotation reports the pod's attachments.
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
)

// The operations of a Request.
const (
	// OpPod returns the pod's metadata (Response.Pod).
	OpPod = "pod"
	// OpNetAttachDef returns a NetworkAttachmentDefinition
	// (k8s.cni.cncf.io/v1) (Response.NetAttachDef).
	OpNetAttachDef = "net-attach-def"
	// OpSetNetworkStatus writes Request.NetworkStatus into the pod's
	// NetworkStatusAnnotation; an empty or null status removes it.
	OpSetNetworkStatus = "set-network-status"
)

// Request is one call to the agent.
type Request struct {
	Op        string `json:"op"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID, when set (CNI_ARGS K8S_POD_UID), must be the pod's: a pod of the
	// same name created again is another pod.
	UID string `json:"uid,omitempty"`
	// PodNamespace is, for OpNetAttachDef, the namespace of the pod the NAD
	// is for; an agent with namespace isolation honours NADs only from it
	// and from "default". Empty: a network the node's config chose
	// (Multus' clusterNetwork, defaultNetworks), which isolation does not
	// restrict; the pod's default-network annotation is the pod's choice
	// and sends it.
	PodNamespace string `json:"podNamespace,omitempty"`
	// CNIArgs are, for OpNetAttachDef, the cni-args of the pod's selection
	// (a JSON object): the agent refuses the NAD when its config with them
	// merged (internal/cniargs) leaves what the NAD's namespace may use.
	CNIArgs json.RawMessage `json:"cniArgs,omitempty"`
	// NetworkStatus is the annotation's value for OpSetNetworkStatus (a
	// JSON list).
	NetworkStatus json.RawMessage `json:"networkStatus,omitempty"`
	// Events are the events of OpEvents.
	Events []Event `json:"events,omitempty"`
	// IPAM is the cluster IPAM call of the OpIPAM* operations (ipam.go).
	IPAM *IPAMRequest `json:"ipam,omitempty"`
	// Policy is the argument of the OpPolicy* operations (policy.go).
	Policy *PolicyRequest `json:"policy,omitempty"`
}

// Response is the agent's answer. Error is set on failure, with Reason.
type Response struct {
	Error        string        `json:"error,omitempty"`
	Reason       Reason        `json:"reason,omitempty"`
	Pod          *Pod          `json:"pod,omitempty"`
	NetAttachDef *NetAttachDef `json:"netAttachDef,omitempty"`
	// Devices answers OpPodDevices: device IDs by resource name.
	Devices map[string][]string `json:"devices,omitempty"`
	IPAM    *IPAMResponse       `json:"ipam,omitempty"`
}

// Fail records err on r: its text, and its Reason when it is an *Error
// (ReasonUnavailable otherwise).
func (r *Response) Fail(err error) {
	r.Error, r.Reason = err.Error(), ReasonUnavailable
	var ae *Error
	if errors.As(err, &ae) {
		r.Reason = ae.Reason
	}
}

// Pod is what the agent tells of a pod.
type Pod struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	NodeName    string            `json:"nodeName,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NetAttachDef is a NetworkAttachmentDefinition: Config is its spec.config
// (a CNI network config or conflist; empty means "the file of that network
// name in the node's configuration directory", as with Multus).
type NetAttachDef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Config    string `json:"config,omitempty"`
	// ResourceName is its ResourceNameAnnotation, if any.
	ResourceName string `json:"resourceName,omitempty"`
}

// Reason classifies a failure.
type Reason string

// The reasons of a failed call.
const (
	// ReasonNotFound: no such pod or NetworkAttachmentDefinition (or the
	// CRD is not installed).
	ReasonNotFound Reason = "NotFound"
	// ReasonBadRequest: the request is malformed.
	ReasonBadRequest Reason = "BadRequest"
	// ReasonUnavailable: the agent could not reach the API server.
	ReasonUnavailable Reason = "Unavailable"
	// ReasonPolicy: the agent's policy refuses what was asked: a
	// NetworkAttachmentDefinition of a namespace the node does not trust
	// with a field or role outside the allowlist, or one of another
	// namespace under namespace isolation (docs/security.md). The message
	// names the field and the fix.
	ReasonPolicy Reason = "Policy"
	// ReasonNotServed: this agent does not serve that part of the API
	// (the cluster IPAM without --cluster-ipam).
	ReasonNotServed Reason = "NotServed"
)

// Error is a failure the agent reported.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// ErrNotFound matches (errors.Is) an Error with ReasonNotFound.
var ErrNotFound = errors.New("not found")

// Is makes errors.Is(err, ErrNotFound) work.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.Reason == ReasonNotFound
}

// UnreachableError is a failure to talk to the agent at all: no socket,
// nobody listening, a broken or timed-out exchange.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cnibox-agent pod API at %s: %v", e.Socket, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// MaxMessage bounds one request or response line: a pod's annotations are
// at most 256 KiB in all.
const MaxMessage = 1 << 20
