package roletest

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Open returns a handle of namespace ns ("" = the node) that is closed at
// the test's end.
func Open(t testing.TB, ns string) *netops.Handle {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// IPv6Of are the IPv6 addresses of link in namespace ns ("" = the node).
func IPv6Of(t testing.TB, ns, link string) []netip.Addr {
	t.Helper()
	all, err := Open(t, ns).AllAddrs(link)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, p := range all {
		if p.Addr().Is6() {
			out = append(out, p.Addr())
		}
	}
	return out
}

// PodEth0 fails the test unless res names one interface, eth0 in pod p.
func PodEth0(t testing.TB, res *current.Result, p Pod) {
	t.Helper()
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != p.Netns {
		t.Fatalf("interfaces = %+v", res.Interfaces)
	}
}

// AddrsOnEth0 checks that each address of res is on the pod's eth0 and
// belongs to interface 0.
func AddrsOnEth0(t testing.TB, pod *netops.Handle, res *current.Result) {
	t.Helper()
	addrs, _ := pod.Addrs("eth0")
	for _, ipc := range res.IPs {
		pfx := attach.PrefixOf(ipc.Address)
		if ipc.Interface == nil || *ipc.Interface != 0 || !slices.Contains(addrs, pfx) {
			t.Errorf("address %s (interface %v) not on the pod's eth0 %v", pfx, ipc.Interface, addrs)
		}
	}
}

// RouteOnEth0 checks that the pod's eth0 has a route to dst via gw.
func RouteOnEth0(t testing.TB, pod *netops.Handle, dst string, gw netip.Addr) {
	t.Helper()
	routes, _ := pod.Routes("eth0")
	if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.String() == dst && r.GW == gw }) {
		t.Errorf("route %s via %s missing in %v", dst, gw, routes)
	}
}

// CheckDelTwice ends an attachment of pod p that ADD with conf c at
// version v answered with out: CHECK (from 0.4.0), DEL twice; then the
// pod's eth0 must be gone and network's store empty.
func (n *Node) CheckDelTwice(role *cniplug.Role, p Pod, c, out []byte, v, network string) {
	n.T.Helper()
	if v >= "0.4.0" {
		n.Must(role, "CHECK", p, WithPrev(n.T, c, out))
	}
	for range 2 {
		n.Must(role, "DEL", p, c)
	}
	if _, err := Open(n.T, p.Netns).LinkByName("eth0"); err == nil {
		n.T.Error("the pod's eth0 is still there after DEL")
	}
	n.Empty(network)
}

// FailedAdd runs an ADD with conf c that must fail and checks that it
// left no eth0 in pod p and nothing in network's store; it returns the
// ADD's error.
func (n *Node) FailedAdd(role *cniplug.Role, p Pod, c []byte, network string) error {
	n.T.Helper()
	_, err := n.Call(role, "ADD", p, c)
	if err == nil {
		n.T.Fatalf("ADD of %s succeeded", c)
	}
	if _, lerr := Open(n.T, p.Netns).LinkByName("eth0"); lerr == nil {
		n.T.Error("the pod's eth0 is left after a failed ADD")
	}
	n.Empty(network)
	return err
}

// DelNetnsGone removes pod p's namespace after its ADD, runs DEL with conf
// c twice, which must succeed, and checks that network's store is empty.
func (n *Node) DelNetnsGone(role *cniplug.Role, p Pod, c []byte, network string) {
	n.T.Helper()
	name := strings.TrimPrefix(p.Netns, "/run/netns/")
	if err := netops.DeleteNamedNS(name); err != nil {
		n.T.Fatal(err)
	}
	for range 2 {
		n.Must(role, "DEL", p, c)
	}
	if _, err := netops.CreateNamedNS(name); err != nil { // for the test's cleanup
		n.T.Fatal(err)
	}
	n.Empty(network)
}

// GCKeeps runs GC with conf c that keeps pod keep: keep's eth0 and
// reservation stay, drop's eth0 goes; then STATUS, and DEL of keep leaves
// network's store empty.
func (n *Node) GCKeeps(role *cniplug.Role, keep, drop Pod, c []byte, network string) {
	n.T.Helper()
	n.Must(role, "GC", keep, WithKeep(n.T, c, keep))
	if _, err := Open(n.T, keep.Netns).LinkByName("eth0"); err != nil {
		n.T.Errorf("GC removed the kept pod's eth0: %v", err)
	}
	if _, err := Open(n.T, drop.Netns).LinkByName("eth0"); err == nil {
		n.T.Error("GC left the dropped pod's eth0")
	}
	if rs := n.Reservations(network); len(rs) != 1 || rs[0].ContainerID != keep.ID {
		n.T.Errorf("reservations after GC: %+v", rs)
	}
	n.Must(role, "STATUS", keep, c)
	n.Must(role, "DEL", keep, c)
	n.Empty(network)
}
