package whereabouts

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// gc has the agent release this node's attachments of the network that are
// not in cni.dev/valid-attachments, in the node's slice pools (the
// network's node_slice_size, or the agent's default slice size, which only
// the agent knows: every GC goes to it); a shared range's pool does not say
// which node an address is of, and the agents' reclaim frees those by pod.
func gc(ctx context.Context, a *cniplug.Args, cfg *config) error {
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(a.StdinData, &keys)
	_, v := keys["cni.dev/valid-attachments"]
	_, o := keys["cni.dev/attachments"]
	if !v && !o {
		return cniplug.ConfError("cni.dev/valid-attachments", "missing: GC releases every address not in this list; pass the attachments to keep ([] to release all)")
	}
	if len(cfg.Ranges) == 0 {
		return nil
	}
	_, resp, err := cfg.ask(ctx, a, agentapi.OpIPAMGC, 0, func(req *agentapi.IPAMRequest) {
		for _, k := range a.Conf.GCKeep() {
			req.Keep = append(req.Keep, agentapi.IPAMAttachment{ContainerID: k.ContainerID, IfName: k.IfName})
		}
	})
	if err != nil {
		return agentErr(cfg, "GC", err)
	}
	for _, ip := range resp.IPs {
		if a.Stderr != nil {
			fmt.Fprintf(a.Stderr, "cnibox whereabouts GC: network %q: released %s\n", cfg.Network, ip)
		}
	}
	return nil
}
