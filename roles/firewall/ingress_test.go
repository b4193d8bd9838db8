package firewall_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// dualPod is a pod of a dual-stack network: its namespace, its bridge ADD
// result and its two addresses.
type dualPod struct {
	chaintest.Pod
	prev   []byte
	v4, v6 netip.Addr
}

// subnet6 is the network's IPv6 subnet, made from its IPv4 one
// (10.78.N.0/24 gives fd78:N::/64).
func (n *fwNet) subnet6() string {
	p := netip.MustParsePrefix(n.Subnet).Addr().As4()
	return fmt.Sprintf("fd78:%x::/64", p[2])
}

func (n *fwNet) dualConf() []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}],[{"subnet":%q}]],
		"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}`, n.Network, n.Bridge, n.Subnet, n.subnet6()))
}

// dualPod adds a pod with an IPv4 and an IPv6 address to the network.
func (n *fwNet) dualPod(name string) dualPod {
	p := n.NewPod(name)
	out := n.Must(bridge.Role, "ADD", p, n.dualConf())
	n.T.Cleanup(func() { n.Call(bridge.Role, "DEL", p, n.dualConf()) })
	d := dualPod{Pod: p, prev: out}
	for _, ipc := range chaintest.Result(n.T, out, "1.0.0").IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		if a = a.Unmap(); a.Is4() {
			d.v4 = a
		} else {
			d.v6 = a
		}
	}
	if !d.v4.IsValid() || !d.v6.IsValid() {
		n.T.Fatalf("pod %s has no address of each family: %s", name, out)
	}
	// Until duplicate address detection ends, the pod cannot use its IPv6
	// address (not even to reach itself), nor the node its gateway's.
	waitDAD(n.T, "-n", filepath.Base(p.Netns), "-6", "addr", "show", "tentative")
	waitDAD(n.T, "-6", "addr", "show", "dev", n.Bridge, "tentative")
	return d
}

// waitDAD waits until `ip args...` (a listing of tentative addresses)
// lists none.
func waitDAD(t *testing.T, args ...string) {
	t.Helper()
	ip := nstest.RequireProgram(t, "ip", "iproute2")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := runCmd(ip, args...)
		if err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("addresses still tentative after 30 s:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fw runs the firewall's verb for the pod with the given ingressPolicy.
func (n *fwNet) fw(verb string, p dualPod, policy string) {
	n.T.Helper()
	n.Must(firewall.Role, verb, p.Pod, n.fwConf(p.prev, map[string]any{"ingressPolicy": policy}))
}

// path is one connection a test expects to work or not: from a namespace to
// an address in another.
type path struct {
	name     string
	from, to string
	ip       netip.Addr
	want     bool
}

// paths checks, for both families, each path from a pod to another (all
// at once: a dropped path waits for its dial's timeout).
func paths(t *testing.T, ps ...path) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := nstest.Probe(t, p.from, p.to, p.ip, p.want)
			if (err == nil) != p.want {
				mu.Lock()
				defer mu.Unlock()
				if p.want {
					bad = append(bad, fmt.Sprintf("%s (%s): not reached: %v", p.name, p.ip, err))
				} else {
					bad = append(bad, fmt.Sprintf("%s (%s): reached, want it dropped", p.name, p.ip))
				}
			}
		}()
	}
	wg.Wait()
	for _, b := range bad {
		t.Error(b)
	}
}

// both is the path from a namespace to a pod over IPv4 and over IPv6.
func both(name, from string, to dualPod, want bool) []path {
	return []path{{name + " v4", from, to.Netns, to.v4, want}, {name + " v6", from, to.Netns, to.v6, want}}
}

// modes runs f without any iptables table (rules in cnibox-firewall) and
// with iptables-nft's and ip6tables-nft's FORWARD policy DROP (as Docker
// leaves them), each on a clean ruleset of the node.
func modes(t *testing.T, f func(t *testing.T, drop bool)) {
	for _, drop := range []bool{false, true} {
		name := "no-iptables"
		if drop {
			name = "forward-drop"
		}
		t.Run(name, func(t *testing.T) {
			resetNode(t)
			if drop {
				iptables(t, "-P", "FORWARD", "DROP")
				ip6tables(t, "-P", "FORWARD", "DROP")
			}
			f(t, drop)
		})
	}
}

// ip6tables runs ip6tables-nft in the test's node namespace.
func ip6tables(t *testing.T, args ...string) string {
	t.Helper()
	bin := nstest.RequireProgram(t, "ip6tables-nft", "iptables")
	out, err := runCmd(bin, args...)
	if err != nil {
		t.Fatalf("ip6tables-nft %v: %v: %s", args, err, out)
	}
	return out
}

// TestSameBridgeBothWays: networks a (same-bridge) and b (open) on two
// bridges, dual-stack. b's pods cannot open connections to a's, over
// either family; a's pods open connections to b's (the reference's
// semantics: same-bridge keeps others out of its bridge and leaves the
// way out open, as it must for a pod to reach anything off its bridge);
// a pod on a's own bridge and the node reach a. Once b is same-bridge too,
// neither reaches the other. After the firewall's DEL of both (and an open
// ADD again, under DROP) they reach each other both ways: no isolation
// rule stays behind. Under DROP, nothing passes before the firewall's ADD.
func TestSameBridgeBothWays(t *testing.T) {
	modes(t, func(t *testing.T, drop bool) {
		a, b := newNet(t, "fwsa"), newNet(t, "fwsb")
		pa, pa2, pb := a.dualPod("fwsa1"), a.dualPod("fwsa2"), b.dualPod("fwsb1")
		if drop { // the DROP policies hold until the firewall opens the paths
			paths(t, both("a to b before the firewall", pa.Netns, pb, false)...)
		}
		a.fw("ADD", pa, "same-bridge")
		a.fw("ADD", pa2, "same-bridge")
		b.fw("ADD", pb, "open")
		a.fw("CHECK", pa, "same-bridge")
		var ps []path
		ps = append(ps, both("b to same-bridge a", pb.Netns, pa, false)...)
		ps = append(ps, both("same-bridge a to open b", pa.Netns, pb, true)...)
		ps = append(ps, both("a2 to a on a's bridge", pa2.Netns, pa, true)...)
		ps = append(ps, both("the node to a", nodeNS(), pa, true)...)
		paths(t, ps...)

		b.fw("ADD", pb, "same-bridge")
		ps = append(both("a to b, both same-bridge", pa.Netns, pb, false), both("b to a, both same-bridge", pb.Netns, pa, false)...)
		paths(t, ps...)

		for _, p := range []dualPod{pa, pa2} {
			a.fw("DEL", p, "same-bridge")
		}
		b.fw("DEL", pb, "same-bridge")
		for _, m := range []string{"samebridge4", "samebridge6", "bridgeof4", "bridgeof6"} {
			waitMap(t, m, func(l string) bool { return !strings.Contains(l, "cnibox/") })
		}
		if drop {
			a.fw("ADD", pa, "open")
			b.fw("ADD", pb, "open")
		}
		ps = append(both("a to b after DEL", pa.Netns, pb, true), both("b to a after DEL", pb.Netns, pa, true)...)
		paths(t, ps...)
	})
}

// bridgedTrafficFiltered makes bridged IPv4 and IPv6 traffic pass the IP
// forward hook in the node's namespace (br_netfilter's
// bridge-nf-call-iptables, per namespace; the test's own), as Docker and
// kubelet nodes have it; it skips when the kernel has no br_netfilter.
func bridgedTrafficFiltered(t *testing.T) {
	for _, f := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"} {
		p := "/proc/sys/net/bridge/" + f
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no br_netfilter in this kernel (%v): traffic between pods of one bridge never meets the forward hook", err)
		}
		if !nstest.InPrivateNetns() {
			t.Fatal("not in nstest's private namespace: would set the machine's " + f)
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			t.Fatalf("set %s in the test's namespace: %v", f, err)
		}
	}
}

// TestIsolatedSameBridge: pods c1 (isolated) and c2 (open) on one bridge,
// d on another, dual-stack. c1 is reached only from itself and the node;
// c2 and d cannot open connections to it; c1 still opens its own to c2
// and d (their replies pass). After c1's DEL, c2 reaches it.
func TestIsolatedSameBridge(t *testing.T) {
	modes(t, func(t *testing.T, drop bool) {
		bridgedTrafficFiltered(t)
		c, d := newNet(t, "fwic1"), newNet(t, "fwid1")
		c1, c2, d1 := c.dualPod("fwic1"), c.dualPod("fwic2"), d.dualPod("fwid1")
		c.fw("ADD", c1, "isolated")
		c.fw("ADD", c2, "open")
		d.fw("ADD", d1, "open")
		c.fw("CHECK", c1, "isolated")
		var ps []path
		ps = append(ps, both("c2 to isolated c1 on its bridge", c2.Netns, c1, false)...)
		ps = append(ps, both("d to isolated c1", d1.Netns, c1, false)...)
		ps = append(ps, both("c1 to itself", c1.Netns, c1, true)...)
		ps = append(ps, both("the node to c1", nodeNS(), c1, true)...)
		ps = append(ps, both("c1 to c2", c1.Netns, c2, true)...)
		ps = append(ps, both("c1 to d", c1.Netns, d1, true)...)
		paths(t, ps...)

		c.fw("DEL", c1, "isolated")
		for _, m := range []string{"isolated4", "isolated6"} {
			waitMap(t, m, func(l string) bool { return !strings.Contains(l, "cnibox/") })
		}
		if drop {
			c.fw("ADD", c1, "open")
		}
		paths(t, both("c2 to c1 after DEL", c2.Netns, c1, true)...)
	})
}

func runCmd(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
