package attach

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/delegate"
)

// PolicyPending closes a Kubernetes pod's addresses until cnibox-agent's
// NetworkPolicy engine has placed it (docs/policy.md, "Across agent
// restarts"): if the node's policy table says a policy could select a pod
// of its namespace, the addresses go in the table's pending set, before
// the pod has them, so no packet of it passes open; in any namespace they
// go in its attached set, which tells the agent the pod is on the node
// until its DEL. Without the table, or outside Kubernetes (no
// K8S_POD_NAMESPACE), nothing is done. The undo takes them out again. It
// reports whether the addresses are pending: then PolicyAdmit, the ADD's
// last step, has the agent place them before the ADD returns.
func PolicyPending(host *netops.Handle, undo *cniplug.Undo, a *cniplug.Args, pod []netip.Prefix) (bool, error) {
	ns := string(a.CNIArgs.K8S_POD_NAMESPACE)
	if ns == "" || len(pod) == 0 {
		return false, nil
	}
	ips := addrsOf(pod)
	pending, err := host.NFT().MarkPolicyPending(ns, ips)
	if err != nil {
		return false, cniplug.Errorf(types.ErrIOFailure, "network policy: %w", err)
	}
	// Pending or not, the addresses are in the table's attached set.
	undo.Push(func() { _ = host.NFT().UnmarkPolicyPending(ips) })
	return pending, nil
}

func addrsOf(pod []netip.Prefix) []netip.Addr {
	ips := make([]netip.Addr, 0, len(pod))
	for _, p := range pod {
		ips = append(ips, p.Addr())
	}
	return ips
}

// policyCallTimeout bounds PolicyAdmit's and PolicyRelease's wait for the
// agent (its transaction included): past it the pod stays pending until
// its status update, as without the call.
const policyCallTimeout = 5 * time.Second

// agentSocket is the pod API's socket the calls go to: $CNIBOX_AGENT_SOCKET
// (an agent with another --socket; tests), else agentapi.DefaultSocket.
func agentSocket() string {
	if s := os.Getenv("CNIBOX_AGENT_SOCKET"); s != "" {
		return s
	}
	return agentapi.DefaultSocket
}

// PolicyAdmit has cnibox-agent place a pending pod's addresses in the
// policy model now (agentapi.OpPolicyAdmit), instead of at its status
// update, and returns once the node's table has them: the pod is open to
// what its policies allow from its first packet. Best effort: without the
// agent's socket, or if the agent cannot (an older agent, no policy, a
// timeout), the pod stays pending until its status update, as before; a
// line says why on the call's stderr.
func PolicyAdmit(ctx context.Context, a *cniplug.Args, pod []netip.Prefix) {
	ns, name := string(a.CNIArgs.K8S_POD_NAMESPACE), string(a.CNIArgs.K8S_POD_NAME)
	if ns == "" || name == "" || len(pod) == 0 || !agentListening() {
		return
	}
	c := agentapi.Client{Socket: agentSocket(), Timeout: policyCallTimeout}
	if err := c.PolicyAdmit(ctx, ns, name, string(a.CNIArgs.K8S_POD_UID), addrsOf(pod)); err != nil {
		delegate.Log(a, "network policy: pod %s/%s stays closed until the agent sees its status: %v", ns, name, err)
	}
}

// PolicyRelease takes a pod's addresses out of the agent's admissions at
// its DEL (agentapi.OpPolicyRelease): the next pod may get them. Best
// effort, as PolicyAdmit.
func PolicyRelease(ctx context.Context, a *cniplug.Args, ips []netip.Addr) {
	if a.CNIArgs.K8S_POD_NAMESPACE == "" || len(ips) == 0 || !agentListening() {
		return
	}
	c := agentapi.Client{Socket: agentSocket(), Timeout: policyCallTimeout}
	if err := c.PolicyRelease(ctx, ips); err != nil {
		var ae *agentapi.Error
		if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonNotServed {
			delegate.Log(a, "network policy: release %v: %v", ips, err)
		}
	}
}

// agentListening reports whether the agent's socket exists (no agent, no
// call: a plain node pays a stat).
func agentListening() bool {
	fi, err := os.Stat(agentSocket())
	return err == nil && fi.Mode()&os.ModeSocket != 0
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
