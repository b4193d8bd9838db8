package macvlan_test

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack, with the master taken from the node's default
// route: the pod gets a macvlan in bridge mode with its addresses and
// routes, reaches the LAN host, which learnt the pod's MAC from its
// gratuitous ARP, and nothing is left after DEL.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				n := newNode(t)
				lan := newLAN(t)
				p := n.NewPod("mv")
				c := conf(v, ranges, "")
				out := n.Must(macvlan.Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != p.Netns {
					t.Fatalf("interfaces = %+v", res.Interfaces)
				}
				pod := roletest.Open(t, p.Netns)
				l, err := pod.SubLinkByName("eth0")
				if err != nil || l.Kind != "macvlan" || l.Mode != "bridge" || !l.Up || l.MAC.String() != res.Interfaces[0].Mac {
					t.Fatalf("pod's eth0 = %+v, %v; want an up macvlan in bridge mode with MAC %s", l, err, res.Interfaces[0].Mac)
				}
				addrs, _ := pod.Addrs("eth0")
				for _, ipc := range res.IPs {
					pfx := attach.PrefixOf(ipc.Address)
					if ipc.Interface == nil || *ipc.Interface != 0 || !slices.Contains(addrs, pfx) {
						t.Errorf("address %s (interface %v) not on the pod's eth0 %v", pfx, ipc.Interface, addrs)
					}
				}
				routes, _ := pod.Routes("eth0")
				if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.String() == "192.168.55.0/24" && r.GW == lanHost4 }) {
					t.Errorf("route 192.168.55.0/24 via %s missing in %v", lanHost4, routes)
				}
				// Before any traffic of the pod: only its announcement can
				// have told the LAN host its MAC.
				if !learnt(t, lan, res.Interfaces[0].Mac) {
					t.Errorf("the LAN host has no neighbour entry with the pod's MAC %s (gratuitous ARP)", res.Interfaces[0].Mac)
				}
				dsts := []netip.Addr{lanHost4}
				if name == "dual" {
					dsts = append(dsts, lanHost6)
				}
				for _, d := range dsts {
					if _, err := pod.Ping(d, 3*time.Second); err != nil {
						t.Errorf("the pod cannot reach the LAN host %s: %v", d, err)
					}
				}
				if eps := n.Endpoints("mvnet"); len(eps) != 1 || eps[0].Plugin != "macvlan" || eps[0].MAC != res.Interfaces[0].Mac || eps[0].Extra["master"] != "lan0" {
					t.Errorf("endpoint records = %+v", eps)
				}
				if v >= "0.4.0" {
					n.Must(macvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
				}
				for range 2 {
					n.Must(macvlan.Role, "DEL", p, c)
				}
				if _, err := pod.LinkByName("eth0"); err == nil {
					t.Error("the pod's eth0 is still there after DEL")
				}
				if _, err := roletest.Open(t, "").LinkByName("lan0"); err != nil {
					t.Errorf("the master is gone: %v", err)
				}
				n.Empty("mvnet")
			})
		}
	}
}

// learnt reports whether the LAN host has (within a second) a neighbour
// entry with mac.
func learnt(t *testing.T, lan, mac string) bool {
	h := roletest.Open(t, lan)
	want, _ := net.ParseMAC(mac)
	for range 20 {
		ns, err := h.Neighs("eth0")
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ns, func(n netops.Neigh) bool { return bytes.Equal(n.MAC, want) }) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
