package agentapi

import (
	"context"
	"net/netip"
)

// The NetworkPolicy operations (cnibox-agent's policy watcher, on the pod
// API's socket): a pod's CNI ADD has its addresses placed in the policy
// model before it returns, instead of waiting for the pod's status
// (docs/policy.md, "A new pod open at once"); its DEL releases them.
const (
	// OpPolicyAdmit places pod Namespace/Name (UID) with PolicyRequest.IPs
	// and answers once the node's policy table has it.
	OpPolicyAdmit = "policy-admit"
	// OpPolicyRelease takes PolicyRequest.IPs out of every admission
	// (the pod's DEL: the addresses may be the next pod's).
	OpPolicyRelease = "policy-release"
)

// PolicyRequest is the argument of the policy operations.
type PolicyRequest struct {
	IPs []netip.Addr `json:"ips"`
}

// PolicyAdmit asks the agent to place pod namespace/name with ips.
func (c *Client) PolicyAdmit(ctx context.Context, namespace, name, uid string, ips []netip.Addr) error {
	_, err := c.Do(ctx, Request{Op: OpPolicyAdmit, Namespace: namespace, Name: name, UID: uid, Policy: &PolicyRequest{IPs: ips}})
	return err
}

// PolicyRelease takes ips out of the agent's admissions.
func (c *Client) PolicyRelease(ctx context.Context, ips []netip.Addr) error {
	_, err := c.Do(ctx, Request{Op: OpPolicyRelease, Policy: &PolicyRequest{IPs: ips}})
	return err
}
