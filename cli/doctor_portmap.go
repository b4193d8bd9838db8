package cli

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/store"
)

// attachmentKey names an attachment: network, container ID, interface.
type attachmentKey struct{ network, cid, ifname string }

// readPortMapRecords reads the portmap role's records, by attachment.
func readPortMapRecords(st *store.Store) (map[attachmentKey]store.PortMapRecord, error) {
	var recs []store.PortMapRecord
	err := st.ViewPortMaps(func(tx *store.PortMapTx) error {
		var err error
		recs, err = tx.List("")
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[attachmentKey]store.PortMapRecord, len(recs))
	for _, r := range recs {
		out[attachmentKey{r.Network, r.ContainerID, r.IfName}] = r
	}
	return out, nil
}

// checkPortMaps: every host port the portmap role recorded for the endpoint
// is in table inet cnibox-portmap, forwarding to the pod and owned by the
// attachmentKey, with its masquerade entries (the same verification as the
// role's CHECK); and where 127.0.0.1 can reach an IPv4 mapping (snat on),
// route_localnet is on for the interface that routes to the pod.
func (d *doctor) checkPortMaps(host *netops.Handle, ep store.Endpoint) {
	r, ok := d.portMaps[attachmentKey{ep.Network, ep.ContainerID, ep.IfName}]
	if !ok {
		return
	}
	want := portmap.PortMapsOfRecord(r)
	if want.Empty() {
		return
	}
	states, err := portmap.VerifyPortMaps(host, want)
	if err != nil {
		d.fail("portmap", "", "read table inet %s: %v", nft.PortMapTable, err)
		return
	}
	for _, s := range states {
		switch s.Status {
		case portmap.PortMapOK:
			d.pass("portmap", "%s (table inet %s)", s, nft.PortMapTable)
		case portmap.PortMapTakenOver:
			d.fail("portmap", "two pods map the same host port and the newest ADD took it over: drop the hostPort from one of them, then "+recreate, "%s", s)
		case portmap.PortMapUnexpected:
			d.warn("portmap", recreate+" (to make the table and the record agree)", "%s: in the table but not in the attachmentKey's record", s)
		default:
			d.fail("portmap", "the pod's host port leads nowhere: "+recreate+" (its ADD adds the element again)", "%s", s)
		}
	}
	d.checkRouteLocalnet(host, want)
}

// checkRouteLocalnet checks what the portmap role sets for 127.0.0.1:
// net.ipv4.conf.<dev>.route_localnet=1 on the interface that routes to an
// IPv4 pod address that has a mapping on every (or a loopback) host address
// and a masquerade entry (snat).
func (d *doctor) checkRouteLocalnet(host *netops.Handle, pm nft.PortMaps) {
	done := map[netip.Addr]bool{}
	for _, m := range pm.Mappings {
		if !m.PodIP.Is4() || done[m.PodIP] || (m.HostIP.IsValid() && !m.HostIP.IsLoopback()) ||
			!slices.ContainsFunc(pm.Masq, func(q nft.PortMasq) bool { return q.PodIP == m.PodIP }) {
			continue
		}
		done[m.PodIP] = true
		dev, err := host.RouteDev(m.PodIP)
		if err != nil {
			d.fail("route_localnet", "the node has no route to the pod: check the bridge and the host veth above",
				"127.0.0.1:%d cannot reach %s: %v", m.HostPort, m.PodIP, err)
			continue
		}
		key := "net.ipv4.conf." + dev + ".route_localnet"
		v, err := host.Sysctl("net/ipv4/conf/" + dev + "/route_localnet")
		switch {
		case err != nil:
			d.fail("route_localnet", "", "read %s: %v", key, err)
		case v != "1":
			d.fail("route_localnet", fmt.Sprintf("sysctl -w %s=1 (the next ADD with a host port sets it too)", key),
				"%s is %s: 127.0.0.1:%d does not reach %s", key, v, m.HostPort, m.PodIP)
		default:
			d.pass("route_localnet", "%s = 1: 127.0.0.1:%d reaches %s", key, m.HostPort, m.PodIP)
		}
	}
}
