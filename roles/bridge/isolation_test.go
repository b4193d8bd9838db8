package bridge_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// gwConf is a bridge network with isGateway on br, addresses from
// 10.11.<net>.0/24 (gateway .1): extra is more fields.
func gwConf(name, br string, net int, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":%q,"isGateway":true,%s
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.11.%d.0/24","gateway":"10.11.%d.1"}]]}}`, name, br, extra, net, net))
}

// TestPortIsolation: two pods on a bridge with portIsolation reach their
// gateway but not each other, and their host veths are isolated ports;
// without it two pods reach each other. CHECK verifies the flag; DEL
// (twice) removes the ports.
func TestPortIsolation(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("briso"); host.DeleteLink("bropen") })
	for _, tc := range []struct {
		name, br string
		net      int
		isolated bool
	}{
		{"isolated", "briso", 1, true},
		{"open", "bropen", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gwConf(tc.name, tc.br, tc.net, fmt.Sprintf(`"portIsolation":%v,`, tc.isolated))
			a, b := n.NewPod(tc.name+"a"), n.NewPod(tc.name+"b")
			outA := n.Must(bridge.Role, "ADD", a, c)
			ipa, ipb := podAddr(t, outA), podAddr(t, n.Must(bridge.Role, "ADD", b, c))
			for _, p := range []roletest.Pod{a, b} {
				iso, err := host.PortIsolated(bridge.HostVethName(p.ID, "eth0"))
				if err != nil || iso != tc.isolated {
					t.Errorf("host veth of %s: isolated = %v (%v), want %v", p.ID, iso, err, tc.isolated)
				}
			}
			gw := netip.MustParseAddr(fmt.Sprintf("10.11.%d.1", tc.net))
			for _, r := range []struct {
				what     string
				from, to string
				ip       netip.Addr
				want     bool
			}{
				{"a to gateway", a.Netns, nodeNS, gw, true},
				{"b to gateway", b.Netns, nodeNS, gw, true},
				{"a to b", a.Netns, b.Netns, ipb, !tc.isolated},
				{"b to a", b.Netns, a.Netns, ipa, !tc.isolated},
			} {
				if err := nstest.Probe(t, r.from, r.to, r.ip, r.want); (err == nil) != r.want {
					t.Errorf("%s (%s): reachable = %v (%v), want %v", r.what, r.ip, err == nil, err, r.want)
				}
			}

			checkA := roletest.WithPrev(t, c, outA)
			n.Must(bridge.Role, "CHECK", a, checkA)
			if tc.isolated {
				if err := host.SetPortIsolated(bridge.HostVethName(a.ID, "eth0"), false); err != nil {
					t.Fatal(err)
				}
				if _, err := n.Call(bridge.Role, "CHECK", a, checkA); roletest.Code(err) != 5 {
					t.Errorf("CHECK of a port no longer isolated: %v, want code 5", err)
				}
			}
			for _, p := range []roletest.Pod{a, b} {
				n.Must(bridge.Role, "DEL", p, c)
				n.Must(bridge.Role, "DEL", p, c)
				if _, err := host.LinkByName(bridge.HostVethName(p.ID, "eth0")); err == nil {
					t.Errorf("host veth of %s left after DEL", p.ID)
				}
			}
			n.Empty(tc.name)
		})
	}
}

// TestDisableContainerInterface: the pod's interface stays down after ADD
// (its host end is on the bridge and up), CHECK passes with it down and
// after it is set up, DEL (twice) removes it; with an ipam section ADD is
// code 7 and makes nothing.
func TestDisableContainerInterface(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brdown") })
	c := []byte(`{"cniVersion":"1.0.0","name":"down","type":"bridge","bridge":"brdown","disableContainerInterface":true}`)
	p := n.NewPod("down")
	out := n.Must(bridge.Role, "ADD", p, c)
	podLink := func() netops.Link {
		return roletest.InNS(t, p.Netns, func(h *netops.Handle) (netops.Link, error) { return h.LinkByName("eth0") })
	}
	if l := podLink(); l.Up {
		t.Errorf("eth0 in the pod is up after ADD with disableContainerInterface")
	}
	hostName := bridge.HostVethName(p.ID, "eth0")
	if hl, err := host.LinkByName(hostName); err != nil || !hl.Up {
		t.Errorf("host end %s: %+v, %v; want it up", hostName, hl, err)
	}
	r := roletest.Result(t, out, "1.0.0")
	if len(r.IPs) != 0 || len(r.Interfaces) != 3 {
		t.Errorf("ADD result %s: want three interfaces and no addresses", out)
	}
	check := roletest.WithPrev(t, c, out)
	n.Must(bridge.Role, "CHECK", p, check)
	roletest.InNS(t, p.Netns, func(h *netops.Handle) (struct{}, error) { return struct{}{}, h.SetLinkUp("eth0") })
	n.Must(bridge.Role, "CHECK", p, check)
	// A second ADD (a runtime's retry) leaves it down again.
	n.Must(bridge.Role, "ADD", p, c)
	if l := podLink(); l.Up {
		t.Errorf("eth0 in the pod is up after a second ADD")
	}
	n.Must(bridge.Role, "DEL", p, c)
	n.Must(bridge.Role, "DEL", p, c)
	if _, err := host.LinkByName(hostName); err == nil {
		t.Errorf("host veth %s left after DEL", hostName)
	}

	withIPAM := gwConf("down", "brdown", 3, `"disableContainerInterface":true,`)
	q := n.NewPod("downipam")
	if _, err := n.Call(bridge.Role, "ADD", q, withIPAM); roletest.Code(err) != 7 {
		t.Errorf("ADD with disableContainerInterface and ipam: %v, want code 7", err)
	}
	if _, err := host.LinkByName(bridge.HostVethName(q.ID, "eth0")); err == nil {
		t.Errorf("ADD refused left a host veth")
	}
	n.Must(bridge.Role, "DEL", q, withIPAM)
	n.Empty("down")
}
