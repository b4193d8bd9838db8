package portmap

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/fault"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// portmapAdd forwards the configured host ports to the pod addresses of
// prevResult and returns prevResult unchanged.
func portmapAdd(_ context.Context, a *cniplug.Args, c *portmapConf, prev *current.Result) (_ types.Result, err error) {
	if len(c.entries) == 0 {
		return prev, nil
	}
	pm, err := c.portMaps(pmOwner(a.Conf.Name, a.ContainerID, a.IfName), podPrefixes(prev, a.IfName))
	if err != nil {
		return nil, err
	}
	if pm.Empty() && !c.hasHostIP() {
		return prev, nil
	}

	a.Mark("config")
	host, err := podns.Host()
	if err != nil {
		return nil, err
	}
	defer host.Close()
	// Before anything is written: a refused hostIP leaves nothing to undo.
	if err := c.checkHostIPs(host.OwnAddr); err != nil {
		return nil, err
	}
	if pm.Empty() {
		return prev, nil
	}
	var undo cniplug.Undo
	defer undo.Finish(&err)
	replaced, err := host.NFT().EnsurePortMaps(pm)
	if err != nil {
		return nil, cniplug.Errorf(types.ErrIOFailure, "forward host ports: %w", err)
	}
	undo.Push(func() { _ = host.NFT().DeletePortMaps(pm) })
	a.Mark("nft")
	fault.Point("portmap/add/after-nft")
	if c.snat {
		if err := ensureRouteLocalnet(host, a, pm); err != nil {
			return nil, err
		}
		fault.Point("portmap/add/after-localnet")
	}
	flushUDPConntrack(host, a, pm)
	a.Mark("localnet")

	old, err := putPortmapRecord(a, c, pm, replaced)
	if err != nil {
		return nil, err
	}
	a.Mark("record")
	fault.Point("portmap/add/after-record")
	// A repeated ADD with other mappings: drop what only the old record had.
	if stale := minusPortMaps(old, pm); !stale.Empty() {
		if err := host.NFT().DeletePortMaps(stale); err != nil {
			pmLog(a, "remove mappings of an earlier ADD of this attachment: %v", err)
		}
	}
	undo.Discard()
	return prev, nil
}

// ensureRouteLocalnet lets 127.0.0.1:hostPort reach the pod: the node's
// connection to its own 127.0.0.1 is DNATed to the pod and leaves through
// the interface that routes to the pod (the bridge), which the kernel allows
// only with net.ipv4.conf.<if>.route_localnet=1. It is written only when an
// IPv4 mapping can be reached on a loopback address and the value is not
// set yet.
func ensureRouteLocalnet(host *netops.Handle, a *cniplug.Args, pm nft.PortMaps) error {
	done := map[netip.Addr]bool{}
	for _, m := range pm.Mappings {
		if !m.PodIP.Is4() || done[m.PodIP] || (m.HostIP.IsValid() && !m.HostIP.IsLoopback()) {
			continue
		}
		done[m.PodIP] = true
		dev, err := host.RouteDev(m.PodIP)
		if err != nil {
			pmLog(a, "no route to %s on the node, 127.0.0.1:%d will not reach it: %v", m.PodIP, m.HostPort, err)
			continue
		}
		key := "net/ipv4/conf/" + dev + "/route_localnet"
		if v, err := host.Sysctl(key); err == nil && v == "1" {
			continue
		}
		if err := host.SetSysctl(key, "1"); err != nil {
			return cniplug.Errorf(types.ErrIOFailure, "let 127.0.0.1 reach the pod through %s: %w", dev, err)
		}
	}
	return nil
}

// flushUDPConntrack deletes the node's conntrack entries of UDP flows to the
// mapped host ports, so that a flow seen before the mapping existed does not
// keep bypassing it. Failures are only logged, as with the reference plugin.
func flushUDPConntrack(host *netops.Handle, a *cniplug.Args, pm nft.PortMaps) {
	ports := map[bool][]uint16{}
	seen := map[bool]map[uint16]bool{true: {}, false: {}}
	for _, m := range pm.Mappings {
		v6 := m.PodIP.Is6()
		if m.Proto != nft.ProtoUDP || seen[v6][m.HostPort] {
			continue
		}
		seen[v6][m.HostPort] = true
		ports[v6] = append(ports[v6], m.HostPort)
	}
	for v6, ps := range ports {
		if _, err := host.FlushUDPConntrack(v6, ps); err != nil {
			pmLog(a, "%v", err)
		}
	}
}
