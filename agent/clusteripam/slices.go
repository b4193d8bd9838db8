package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// sliceCache holds the slices this node leased, by NodeSlicePool name and
// range.
type sliceCache struct {
	mu sync.Mutex
	m  map[string]netip.Prefix
}

// nodeSlice returns this node's slice of rng in the network's
// NodeSlicePool (node_slice_size), creating the pool and leasing a free
// slice when needed, as whereabouts' node slice controller does for every
// node (cnibox's agents lease their own, so no controller is needed).
func (al *Allocator) nodeSlice(ctx context.Context, req *agentapi.IPAMRequest, rng netip.Prefix) (netip.Prefix, error) {
	name := wbpool.NodeSlicePoolName(req.NetworkName, req.Network)
	key := name + "|" + rng.String() + "|" + req.NodeSliceSize
	al.slice.mu.Lock()
	defer al.slice.mu.Unlock()
	if p, ok := al.slice.m[key]; ok {
		return p, nil
	}
	if al.Node == "" {
		return netip.Prefix{}, badRequest("node_slice_size: the agent does not know its node name (--node-name)")
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		sp, err := al.B.GetSlicePool(ctx, name)
		if errors.Is(err, ErrNotFound) {
			slices, derr := wbpool.DivideRange(rng, req.NodeSliceSize)
			if derr != nil {
				return netip.Prefix{}, badRequest("node_slice_size: %v", derr)
			}
			sp = &SlicePool{Name: name, Range: rng.String(), SliceSize: req.NodeSliceSize}
			for _, s := range slices {
				sp.Slices = append(sp.Slices, Slice{Range: s.String()})
			}
			if err := al.B.CreateSlicePool(ctx, sp); err != nil && !errors.Is(err, ErrExists) {
				return netip.Prefix{}, apiErr(err, "create NodeSlicePool %s", name)
			}
			continue
		}
		if err != nil {
			return netip.Prefix{}, apiErr(err, "read NodeSlicePool %s", name)
		}
		if sp.Range != rng.String() || normSize(sp.SliceSize) != normSize(req.NodeSliceSize) {
			return netip.Prefix{}, badRequest("NodeSlicePool %s divides %s into %s slices, but this network says range %s, node_slice_size %s: give networks of one network_name the same range and slice size",
				name, sp.Range, sp.SliceSize, rng, req.NodeSliceSize)
		}
		free := -1
		for i, s := range sp.Slices {
			if s.Node == al.Node {
				p, err := netip.ParsePrefix(s.Range)
				if err != nil {
					return netip.Prefix{}, apiErr(err, "NodeSlicePool %s slice %q", name, s.Range)
				}
				if al.slice.m == nil {
					al.slice.m = map[string]netip.Prefix{}
				}
				al.slice.m[key] = p
				return p, nil
			}
			if s.Node == "" && free < 0 {
				free = i
			}
		}
		if free < 0 {
			return netip.Prefix{}, &agentapi.Error{Reason: agentapi.ReasonExhausted, Msg: fmt.Sprintf("NodeSlicePool %s: all %d slices of %s are leased to other nodes: use a smaller node_slice_size or a larger range", name, len(sp.Slices), sp.Range)}
		}
		sp.Slices[free].Node = al.Node
		if err := al.B.UpdateSlicePool(ctx, sp); err != nil && !errors.Is(err, ErrConflict) {
			return netip.Prefix{}, apiErr(err, "lease a slice of NodeSlicePool %s", name)
		}
	}
	return netip.Prefix{}, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("NodeSlicePool %s: still changed by other writers after %d attempts", name, maxAttempts)}
}

func normSize(s string) string {
	if len(s) > 0 && s[0] == '/' {
		return s[1:]
	}
	return s
}
