package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
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

// Unhook takes a pod's elements out of the node's tables at its DEL, in
// one nftables transaction (netops/nft's UnhookPod): its addresses' in the
// policy table's attached and pending sets (the address may be the next
// pod's), and as u says its masquerade entries and its host port's source
// address check. Gone is no error.
func Unhook(host *netops.Handle, u nft.PodUnhook) error {
	if err := host.NFT().UnhookPod(u); err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	return nil
}
