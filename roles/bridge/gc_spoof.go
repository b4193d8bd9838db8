package bridge

import (
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// gcMacSpoof deletes the MAC spoofing checks of our host veths that are gone
// and not kept: what an ADD that died after the check (or a pod namespace
// deleted without DEL) leaves behind. A check without its port is useless
// whatever its network, and ADD orders veth before check and DEL check
// before veth, so no live attachment ever has a check without its port.
func gcMacSpoof(host *netops.Handle, keep map[string]bool, ours func(string) bool) error {
	ports, err := host.MacSpoofPorts()
	if err != nil || len(ports) == 0 {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	links, err := host.Links()
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	exists := make(map[string]bool, len(links))
	for _, l := range links {
		exists[l.Name] = true
	}
	for _, port := range ports {
		if !ours(port) || keep[port] || exists[port] {
			continue
		}
		if err := host.DeleteMacSpoofCheck(port); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "delete stale mac spoof check of %s: %w", port, err)
		}
	}
	return nil
}
