package agentapi

import (
	"context"
	"errors"
)

// The cluster IPAM operations (the whereabouts role): Request.IPAM says
// what, Response.IPAM answers. The agent keeps the pools in whereabouts'
// CRDs (or in etcd) and the role never reaches the API itself.
const (
	// OpIPAMAdd reserves an address of every range for the attachment
	// (again the same ones for an attachment that has them).
	OpIPAMAdd = "ipam-add"
	// OpIPAMDel releases the attachment's addresses; nothing to release is
	// success, and with the API unreachable the agent queues the release.
	OpIPAMDel = "ipam-del"
	// OpIPAMCheck reports whether the attachment holds its addresses.
	OpIPAMCheck = "ipam-check"
	// OpIPAMStatus reports whether the agent can allocate on the network.
	OpIPAMStatus = "ipam-status"
	// OpIPAMPools lists the cluster pools (cnibox inspect ipam, doctor).
	OpIPAMPools = "ipam-pools"
	// OpIPAMGC releases the attachments of this node that are not in
	// IPAMRequest.Keep (the runtime's GC).
	OpIPAMGC = "ipam-gc"
)

// ReasonExhausted: every address of a range is taken.
const ReasonExhausted Reason = "Exhausted"

// ReasonConflict: an address asked for is held by another pod.
const ReasonConflict Reason = "Conflict"

// IPAMRequest is one cluster IPAM call: the attachment, and the network as
// the role parsed it from whereabouts' config.
type IPAMRequest struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// PodRef is "namespace/name" (whereabouts' podref), "" without a pod.
	PodRef string `json:"podRef,omitempty"`
	PodUID string `json:"podUID,omitempty"`
	// Network is the config's "name" (the NodeSlicePool of an unnamed
	// network is named after it).
	Network     string      `json:"network"`
	NetworkName string      `json:"networkName,omitempty"`
	Ranges      []IPAMRange `json:"ranges,omitempty"`
	// Overlapping: enable_overlapping_ranges (an
	// OverlappingRangeIPReservation per address).
	Overlapping   bool   `json:"overlapping,omitempty"`
	NodeSliceSize string `json:"nodeSliceSize,omitempty"`
	// Requested are addresses asked for (CNI_ARGS IP=, the ips capability):
	// each is reserved in the range that holds it instead of the lowest free
	// one.
	Requested []string `json:"requested,omitempty"`
	// Sticky: a pod that comes back (same podref) gets the address it held
	// last, when it is still free.
	Sticky bool `json:"sticky,omitempty"`
	// Keep are the attachments GC keeps (OpIPAMGC).
	Keep []IPAMAttachment `json:"keep,omitempty"`
}

// IPAMAttachment names an attachment.
type IPAMAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// IPAMRange is one range, as whereabouts normalizes it: Range is a masked
// CIDR ("10.1.0.0/24"), Start and End optional addresses, Exclude CIDRs.
type IPAMRange struct {
	Range   string   `json:"range"`
	Start   string   `json:"start,omitempty"`
	End     string   `json:"end,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// IPAMResponse is the agent's answer: the reserved addresses, one per
// range in the order of the request, in CIDR form with the range's prefix
// length ("10.1.0.5/24"); Queued says a DEL's release waits for the API.
type IPAMResponse struct {
	IPs    []string   `json:"ips,omitempty"`
	Queued bool       `json:"queued,omitempty"`
	Pools  []IPAMPool `json:"pools,omitempty"`
}

// IPAMPool is one pool as `cnibox inspect ipam` shows it.
type IPAMPool struct {
	Kind        string           `json:"kind"` // IPPool, NodeSlicePool
	Name        string           `json:"name"`
	Range       string           `json:"range"`
	Allocations []IPAMAllocation `json:"allocations,omitempty"`
	// Slices are a NodeSlicePool's slices: "range=node".
	Slices []string `json:"slices,omitempty"`
	// Pending counts releases queued for this pool.
	Pending int `json:"pending,omitempty"`
}

// IPAMAllocation is one address of a pool and who holds it.
type IPAMAllocation struct {
	IP          string `json:"ip"`
	ContainerID string `json:"id"`
	PodRef      string `json:"podref"`
	IfName      string `json:"ifname,omitempty"`
}

// IPAM sends a cluster IPAM call (op is one of the OpIPAM* operations).
func (c *Client) IPAM(ctx context.Context, op string, req *IPAMRequest) (*IPAMResponse, error) {
	r := Request{Op: op, IPAM: req}
	resp, err := c.Do(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.IPAM == nil {
		return nil, &UnreachableError{Socket: c.socket(), Err: errors.New("the answer has no ipam part (an agent without --cluster-ipam?)")}
	}
	return resp.IPAM, nil
}
