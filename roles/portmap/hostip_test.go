package portmap_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/portmap"
)

// TestPortmapHostIPNotLocal is issue 48's capture: a pod asks for a hostIP
// that is another machine's address (a DNS server, the cluster's API
// service). ADD refuses it with code 7 naming the field, the value and the
// fix, and leaves nothing in table inet cnibox-portmap nor in the store,
// also when an earlier entry of the same request was valid; CHECK refuses
// it the same way; DEL (twice) succeeds.
func TestPortmapHostIPNotLocal(t *testing.T) {
	n := newPMNode(t)
	for _, tc := range []struct {
		name  string
		maps  []pmMap
		field string
		value string
	}{
		{"DNS", []pmMap{{HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "198.51.100.53"}},
			"runtimeConfig.portMappings[0].hostIP", "198.51.100.53"},
		{"API service", []pmMap{{HostPort: 443, ContainerPort: 8443, HostIP: "10.96.0.1"}},
			"runtimeConfig.portMappings[0].hostIP", "10.96.0.1"},
		{"after a valid entry", []pmMap{{HostPort: 8080, ContainerPort: 80}, {HostPort: 8081, ContainerPort: 80, HostIP: pmNodeIP4.String()},
			{HostPort: 443, ContainerPort: 8443, HostIP: "10.96.0.1"}},
			"runtimeConfig.portMappings[2].hostIP", "10.96.0.1"},
		{"IPv6", []pmMap{{HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "2001:db8::53"}},
			"runtimeConfig.portMappings[0].hostIP", "2001:db8::53"},
		{"a neighbour on the node's subnet", []pmMap{{HostPort: 80, ContainerPort: 80, HostIP: pmRemoteIP4.String()}},
			"runtimeConfig.portMappings[0].hostIP", pmRemoteIP4.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.refused(t, tc.maps, nil, tc.field, tc.value, "not an address of this node", "0.0.0.0")
		})
	}
}

// refused runs ADD and CHECK of portmap with maps and the config's extra
// fields after a bridge ADD, and checks that each is refused with code 7
// saying each of wants; the refused ADD leaves no element and no record;
// DEL (twice) succeeds.
func (n *pmNode) refused(t *testing.T, maps []pmMap, extra map[string]any, wants ...string) {
	t.Helper()
	p := n.newPod("capture")
	prev := n.must(bridge.Role, "ADD", p, n.bridgeConf("1.1.0"))
	conf := n.portmapConf("1.1.0", maps, prev, extra)
	for _, cmd := range []string{"ADD", "CHECK"} {
		_, err := n.call(portmap.Role, cmd, p, conf)
		var ce *cniplug.CodedError
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig {
			t.Fatalf("%s: error %v (code %d); want code 7", cmd, err, cniplug.CodeOf(err))
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", cmd, err, want)
			}
		}
	}
	if es := pmEntries(t); len(es) != 0 {
		t.Errorf("elements after the refused ADD: %+v", es)
	}
	if r, ok := n.records()[p.id]; ok {
		t.Errorf("record after the refused ADD: %+v", r)
	}
	n.down(p, "1.1.0", maps, prev)
}

// TestPortmapHostIPNotOwn is issue 60's capture: the node holds addresses
// of other services (kube-proxy's IPVS mode puts every Service address on
// kube-ipvs0, NodeLocal DNSCache binds 169.254.20.10 on nodelocaldns,
// kube-vip and keepalived add VIPs to the uplink), and a pod asking for a
// hostIP on one of them would capture the connections that pods and the
// node make to that service. ADD and CHECK refuse each (code 7, the field,
// the value, the device that holds it and the allowedHostIPs fix) and leave
// nothing behind; the uplink's own address is accepted; a VIP listed in
// allowedHostIPs is accepted and forwarded; allowedHostIPs does not let
// another machine's address through. kube-ipvs0 and nodelocaldns are
// bridges here (this kernel lacks dummy devices; the device's name is what
// counts, and netops' TestOwnAddr checks a dummy by its kind).
func TestPortmapHostIPNotOwn(t *testing.T) {
	n := newPMNode(t)
	host, err := netops.Open("")
	pmMust(t, err)
	defer host.Close()
	for _, d := range []struct{ link, addr string }{{"kube-ipvs0", "10.96.0.1/32"}, {"nodelocaldns", "169.254.20.10/32"}} {
		_, err := host.EnsureBridge(netops.BridgeOpts{Name: d.link})
		pmMust(t, err)
		t.Cleanup(func() { h, _ := netops.Open(""); h.DeleteLink(d.link); h.Close() })
		pmMust(t, host.EnsureAddr(d.link, netip.MustParsePrefix(d.addr), netops.AddrOpts{}))
	}
	// VIPs on the uplink: a /32 and a /128 beside its subnets (kube-vip,
	// keepalived), and one in its subnet, which the kernel makes secondary.
	for _, p := range []string{"192.168.212.100/32", "192.168.212.101/24", "fd00:212::100/128"} {
		pmMust(t, host.EnsureAddr("pmlink0", netip.MustParsePrefix(p), netops.AddrOpts{NoDAD: true}))
	}
	pmWaitLocal(t, host, netip.MustParseAddr("fd00:212::100"))
	const field = "runtimeConfig.portMappings[0].hostIP"
	for _, tc := range []struct {
		name, hostIP, proto, why string
	}{
		{"Service address on kube-ipvs0", "10.96.0.1", "tcp", "kube-ipvs0"},
		{"NodeLocal DNSCache", "169.254.20.10", "udp", "nodelocaldns"},
		{"/32 VIP beside the uplink's subnet", "192.168.212.100", "tcp", "/32 on pmlink0 beside its 192.168.212.1/24"},
		{"secondary VIP", "192.168.212.101", "tcp", "secondary address of pmlink0"},
		{"/128 VIP", "fd00:212::100", "tcp", "/128 on pmlink0"},
		{"loopback range beyond 127.0.0.1", "127.0.0.53", "udp", "127.0.0.0/8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			maps := []pmMap{{HostPort: 443, ContainerPort: 8443, Protocol: tc.proto, HostIP: tc.hostIP}}
			n.refused(t, maps, nil, field, tc.hostIP, "not one of the node's own addresses", tc.why, `"allowedHostIPs"`, "0.0.0.0")
		})
	}
	t.Run("allowedHostIPs does not make another machine's address local", func(t *testing.T) {
		maps := []pmMap{{HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "198.51.100.53"}}
		n.refused(t, maps, map[string]any{"allowedHostIPs": []string{"198.51.100.0/24"}}, field, "198.51.100.53", "not an address of this node")
	})
	t.Run("the uplink's address", func(t *testing.T) {
		p := n.newPod("own")
		maps := []pmMap{{HostPort: 8443, ContainerPort: 80, HostIP: pmNodeIP4.String()}}
		prev := n.up(p, "1.1.0", maps, nil)
		n.must(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))
		n.down(p, "1.1.0", maps, prev)
	})
	t.Run("an allowed VIP", func(t *testing.T) {
		p := n.newPod("vip")
		vip := netip.MustParseAddr("192.168.212.100")
		extra := map[string]any{"allowedHostIPs": []string{"10.96.0.0/12", vip.String()}}
		maps := []pmMap{{HostPort: 8443, ContainerPort: 80, HostIP: vip.String()}}
		prev := n.up(p, "1.1.0", maps, extra)
		n.must(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, extra))
		pmServeHTTP(t, p, 80)
		if body, err := pmGet(t, n.remote, vip, 8443); err != nil || body != p.id+" "+pmRemoteIP4.String() {
			t.Errorf("GET %s:8443 from the remote host = %q, %v", vip, body, err)
		}
		n.down(p, "1.1.0", maps, prev)
	})
}

// TestPortmapHostIPGone: a mapping on an address the node had at ADD; the
// address goes. CHECK then refuses it as ADD would (code 7), and DEL
// (twice) still succeeds and removes the elements and the record.
func TestPortmapHostIPGone(t *testing.T) {
	n := newPMNode(t)
	// An address of its own subnet (one in 192.168.212.0/24 would be a
	// secondary address, which is not the node's own), and the remote host
	// on that subnet too.
	extra := netip.MustParsePrefix("192.168.213.1/24")
	remoteExtra := netip.MustParsePrefix("192.168.213.2/24")
	host, err := netops.Open("")
	pmMust(t, err)
	defer host.Close()
	pmMust(t, host.EnsureAddr("pmlink0", extra, netops.AddrOpts{}))
	remote, err := netops.Open(n.remote)
	pmMust(t, err)
	defer remote.Close()
	pmMust(t, remote.EnsureAddr("eth0", remoteExtra, netops.AddrOpts{}))
	p := n.newPod("gone")
	maps := []pmMap{{HostPort: 8980, ContainerPort: 80, HostIP: extra.Addr().String()}}
	prev := n.up(p, "1.1.0", maps, nil)
	pmServeHTTP(t, p, 80)
	if body, err := pmGet(t, n.remote, extra.Addr(), 8980); err != nil || body != p.id+" "+remoteExtra.Addr().String() {
		t.Fatalf("GET %s:8980 from the remote host = %q, %v", extra.Addr(), body, err)
	}
	n.must(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))

	pmMust(t, host.DeleteAddr("pmlink0", extra))
	_, err = n.call(portmap.Role, "CHECK", p, n.portmapConf("1.1.0", maps, prev, nil))
	if code := cniplug.CodeOf(err); code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "runtimeConfig.portMappings[0].hostIP") {
		t.Errorf("CHECK after the address went: %v (code %d); want code 7 naming the hostIP", err, code)
	}
	n.down(p, "1.1.0", maps, prev)
	if es := pmEntries(t); len(es) != 0 {
		t.Errorf("elements after DEL: %+v", es)
	}
	if r, ok := n.records()[p.id]; ok {
		t.Errorf("record after DEL: %+v", r)
	}
}
