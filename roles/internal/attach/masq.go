package attach

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// CheckMasq verifies that every address of prev has its masquerade entry,
// one get each (a dump of the maps can miss an element that other pods'
// calls change meanwhile).
func CheckMasq(host *netops.Handle, prev *current.Result) error {
	for _, ipc := range prev.IPs {
		ip := PrefixOf(ipc.Address).Addr()
		ok, err := host.NFT().HasMasq(ip)
		if err != nil {
			return cniplug.WithCode(types.ErrIOFailure, err)
		}
		if !ok {
			return cniplug.Errorf(types.ErrIOFailure, "masquerade entry for %s is missing (table inet cnibox)", ip)
		}
	}
	return nil
}

// Masquerade puts the masquerade entries of network for the pod's
// addresses (ipMasq) and pushes their removal on undo.
func Masquerade(host *netops.Handle, undo *cniplug.Undo, network string, pod []netip.Prefix) error {
	if err := host.NFT().EnsureMasq(network, pod); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "ipMasq: %w", err)
	}
	ips := make([]netip.Addr, 0, len(pod))
	for _, p := range pod {
		ips = append(ips, p.Addr())
	}
	undo.Push(func() { _ = host.NFT().DeleteMasq(ips) })
	return nil
}

// KeptIPs is the set of the pod addresses of the endpoint records GC keeps,
// for GCMasq.
func KeptIPs(kept []store.Endpoint) map[netip.Addr]bool {
	keep := map[netip.Addr]bool{}
	for _, ep := range kept {
		for _, p := range ep.IPs {
			keep[p.Addr()] = true
		}
	}
	return keep
}

// GCMasq deletes network's masquerade entries whose pod address is not kept.
func GCMasq(host *netops.Handle, network string, keep map[netip.Addr]bool) error {
	entries, err := host.NFT().MasqEntries()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	var drop []netip.Addr
	for _, e := range entries {
		if e.Network == network && !keep[e.PodIP] {
			drop = append(drop, e.PodIP)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if err := host.NFT().DeleteMasq(drop); err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "remove stale masquerade entries %v: %w", drop, err)
	}
	return nil
}

// EnableForwarding turns on IP forwarding on the node for the families of
// ips; a value already set is not written again.
func EnableForwarding(host *netops.Handle, ips []netip.Prefix) error {
	done := map[bool]bool{}
	for _, p := range ips {
		is4 := p.Addr().Is4()
		if done[is4] {
			continue
		}
		done[is4] = true
		key := "net.ipv6.conf.all.forwarding"
		if is4 {
			key = "net.ipv4.ip_forward"
		}
		if v, err := host.Sysctl(key); err == nil && v == "1" {
			continue
		}
		if err := host.SetSysctl(key, "1"); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "enable forwarding (%s): %w", key, err)
		}
	}
	return nil
}
