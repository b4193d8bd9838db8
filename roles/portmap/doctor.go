package portmap

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// doctor checks that every host port recorded for the endpoint is in table
// inet cnibox-portmap, forwarding to the pod and owned by the attachment,
// with its masquerade entries (the role's CHECK); and where 127.0.0.1 can
// reach an IPv4 mapping (snat on), that route_localnet is on for the
// interface that routes to the pod.
func doctor(c *cniplug.EndpointCheck, want nft.PortMaps) {
	states, err := VerifyPortMaps(c.Host, want)
	if err != nil {
		c.Fail("portmap", "", "read table inet %s: %v", nft.PortMapTable, err)
		return
	}
	for _, s := range states {
		switch s.Status {
		case PortMapOK:
			c.Pass("portmap", "%s (table inet %s)", s, nft.PortMapTable)
		case PortMapTakenOver:
			c.Fail("portmap", "two pods map the same host port and the newest ADD took it over: drop the hostPort from one of them, then "+c.Recreate, "%s", s)
		case PortMapUnexpected:
			c.Warn("portmap", c.Recreate+" (to make the table and the record agree)", "%s: in the table but not in the attachment's record", s)
		default:
			c.Fail("portmap", "the pod's host port leads nowhere: "+c.Recreate+" (its ADD adds the element again)", "%s", s)
		}
	}
	doctorRouteLocalnet(c, c.Host, want)
}

// doctorRouteLocalnet checks what the role sets for 127.0.0.1:
// net.ipv4.conf.<dev>.route_localnet=1 on the interface that routes to an
// IPv4 pod address that has a mapping on every (or a loopback) host address
// and a masquerade entry (snat).
func doctorRouteLocalnet(c *cniplug.EndpointCheck, host *netops.Handle, pm nft.PortMaps) {
	done := map[netip.Addr]bool{}
	for _, m := range pm.Mappings {
		if !m.PodIP.Is4() || done[m.PodIP] || (m.HostIP.IsValid() && !m.HostIP.IsLoopback()) ||
			!slices.ContainsFunc(pm.Masq, func(q nft.PortMasq) bool { return q.PodIP == m.PodIP }) {
			continue
		}
		done[m.PodIP] = true
		dev, err := host.RouteDev(m.PodIP)
		if err != nil {
			c.Fail("route_localnet", "the node has no route to the pod: check the bridge and the host veth above",
				"127.0.0.1:%d cannot reach %s: %v", m.HostPort, m.PodIP, err)
			continue
		}
		key := "net.ipv4.conf." + dev + ".route_localnet"
		v, err := host.Sysctl("net/ipv4/conf/" + dev + "/route_localnet")
		switch {
		case err != nil:
			c.Fail("route_localnet", "", "read %s: %v", key, err)
		case v != "1":
			c.Fail("route_localnet", fmt.Sprintf("sysctl -w %s=1 (the next ADD with a host port sets it too)", key),
				"%s is %s: 127.0.0.1:%d does not reach %s", key, v, m.HostPort, m.PodIP)
		default:
			c.Pass("route_localnet", "%s = 1: 127.0.0.1:%d reaches %s", key, m.HostPort, m.PodIP)
		}
	}
}
