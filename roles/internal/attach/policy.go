package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// PolicyPending closes a Kubernetes pod's addresses until cnibox-agent's
// NetworkPolicy engine has placed it (docs/policy.md, "Across agent
// restarts"): if the node's policy table says a policy could select a pod
// of its namespace, the addresses go in the table's pending set, before
// the pod has them, so no packet of it passes open; in any namespace they
// go in its attached set, which tells the agent the pod is on the node
// until its DEL. Without the table, or outside Kubernetes (no
// K8S_POD_NAMESPACE), nothing is done. The undo takes them out again.
func PolicyPending(host *netops.Handle, undo *cniplug.Undo, a *cniplug.Args, pod []netip.Prefix) error {
	ns := string(a.CNIArgs.K8S_POD_NAMESPACE)
	if ns == "" || len(pod) == 0 {
		return nil
	}
	ips := make([]netip.Addr, 0, len(pod))
	for _, p := range pod {
		ips = append(ips, p.Addr())
	}
	if _, err := host.NFT().MarkPolicyPending(ns, ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "network policy: %w", err)
	}
	// Pending or not, the addresses are in the table's attached set.
	undo.Push(func() { _ = host.NFT().UnmarkPolicyPending(ips) })
	return nil
}

// PolicyUnpend takes a pod's addresses out of the policy table's pending
// set (DEL: the address may be the next pod's); gone is no error.
func PolicyUnpend(host *netops.Handle, ips []netip.Addr) error {
	if err := host.NFT().UnmarkPolicyPending(ips); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "network policy: %w", err)
	}
	return nil
}
