package overlay

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestVXLANLearning is net-conf.json's Backend.Learning with flannel's
// meaning: the device learns remote MACs (the kernel's "learning") and the
// agent's kernel sync leaves the entries the kernel learned alone, while it
// still removes a stale permanent entry. Without Learning the same learned
// entry is removed as flannel removes what it did not program.
func TestVXLANLearning(t *testing.T) {
	for _, learning := range []bool{true, false} {
		t.Run(fmt.Sprintf("learning=%v", learning), func(t *testing.T) {
			c := newCluster(t, 2)
			c.startEtcd()
			c.put(etcdPrefix+"/config", fmt.Sprintf(
				`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "Learning": %v}}`, learning))
			for _, n := range c.nodes {
				n.startAgent("--resync-interval", "1s")
			}
			c.converge(c.nodes...)
			n1 := c.nodes[0]

			h1 := openH(t, n1.ns)
			vx, err := h1.VXLANByName(device)
			must(t, err)
			if vx.Learning != learning {
				t.Fatalf("%s learning = %v, want %v (Backend.Learning)", device, vx.Learning, learning)
			}

			// An entry as the kernel learns one: dynamic (REACHABLE), not
			// programmed by the agent; and a stale permanent one.
			learned, _ := net.ParseMAC("02:42:0a:f4:63:01")
			stale, _ := net.ParseMAC("02:42:0a:f4:63:02")
			addFDB(t, n1.ns, learned, "192.168.77.99", netlink.NUD_REACHABLE)
			addFDB(t, n1.ns, stale, "192.168.77.98", netlink.NUD_PERMANENT)

			fdbHas := func(mac net.HardwareAddr) (bool, string) {
				fdb, err := h1.FDB(device)
				if err != nil {
					return false, err.Error()
				}
				var b strings.Builder
				found := false
				for _, e := range fdb {
					fmt.Fprintf(&b, "%s\n", e.String())
					found = found || e.MAC.String() == mac.String()
				}
				return found, b.String()
			}
			waitUntil(t, "the stale permanent fdb entry removed by the resync", func() (bool, string) {
				found, state := fdbHas(stale)
				return !found, state
			})
			// The resync that removed the stale entry has seen the learned
			// one; two more intervals and it is still the agent's verdict.
			time.Sleep(2500 * time.Millisecond)
			found, state := fdbHas(learned)
			if learning && !found {
				t.Errorf("with Learning the agent removed a learned fdb entry; fdb:\n%s\nagent log:\n%s", state, n1.log())
			}
			if !learning && found {
				t.Errorf("without Learning a dynamic fdb entry the agent did not program is still there; fdb:\n%s", state)
			}
		})
	}
}

// addFDB adds an fdb entry mac -> dst on the node's VXLAN device with the
// given state, as the kernel (dynamic) or an operator (permanent) would.
func addFDB(t *testing.T, ns string, mac net.HardwareAddr, dst string, state int) {
	t.Helper()
	nsh, err := netns.GetFromPath(ns)
	must(t, err)
	defer nsh.Close()
	nl, err := netlink.NewHandleAt(nsh)
	must(t, err)
	defer nl.Close()
	link, err := nl.LinkByName(device)
	must(t, err)
	must(t, nl.NeighAppend(&netlink.Neigh{
		LinkIndex: link.Attrs().Index, Family: unix.AF_BRIDGE, State: state,
		Flags: netlink.NTF_SELF, HardwareAddr: mac, IP: net.ParseIP(dst),
	}))
}
