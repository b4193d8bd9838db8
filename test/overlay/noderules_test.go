package overlay

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
)

// iptablesIn runs iptables-nft (or ip6tables-nft with v6) in the node's
// namespace, as an operator (or Docker) would, and returns its output.
func (n *node) iptables(v6 bool, args ...string) (string, error) {
	bin := "iptables-nft"
	if v6 {
		bin = "ip6tables-nft"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		n.c.t.Skipf("%s not installed (Debian: apt-get install iptables)", bin)
	}
	var out bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startIn(n.c.t, n.ns, cmd); err != nil {
		return "", err
	}
	err = cmd.Wait()
	return out.String(), err
}

// waitFor polls cond (a kernel or rule state the agent restores) until it
// holds or the deadline passes.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last state:\n%s", what, waitFor, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVXLANNodeRules is flannel's node defaults on nodes whose forward
// policy is DROP (iptables-nft's, as Docker sets it): with
// --iptables-forward-rules=false pods on different nodes cannot talk; with
// the default the agent writes flannel's FLANNEL-FWD rules (which
// iptables-nft lists as flanneld's own) and they can. Rules, masquerade and
// the blackhole route (--ip-blackhole-route) that someone flushes come back
// within --iptables-resync; the device's MTU is Backend.MTU minus 50, as
// flannel's.
func TestVXLANNodeRules(t *testing.T) {
	c := newCluster(t, 2)
	c.startEtcd()
	c.put(etcdPrefix+"/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "MTU": 1400}}`)
	n1, n2 := c.nodes[0], c.nodes[1]
	for _, n := range c.nodes {
		for _, v6 := range []bool{false, true} {
			if out, err := n.iptables(v6, "-P", "FORWARD", "DROP"); err != nil {
				t.Fatalf("iptables -P FORWARD DROP on %s: %v\n%s", n.name, err, out)
			}
		}
	}

	// Without the forward rules the policy drops pod traffic between nodes.
	for _, n := range c.nodes {
		n.startAgent("--iptables-forward-rules=false")
	}
	c.converge(c.nodes...)
	p1, err := n1.addPod("a")
	must(t, err)
	p2, err := n2.addPod("a")
	must(t, err)
	if err := nstest.Probe(t, p1.ns, p2.ns, p2.ip, false); err == nil {
		t.Fatalf("%s reached %s through FORWARD policy DROP without forward rules: the test cannot tell", p1.id, p2.id)
	}
	if out, _ := n1.iptables(false, "-S", "FLANNEL-FWD"); strings.Contains(out, "ACCEPT") {
		t.Fatalf("--iptables-forward-rules=false wrote rules:\n%s", out)
	}

	// The defaults: forward rules, and here a blackhole route and a
	// resync of one second.
	for _, n := range c.nodes {
		n.stopAgent()
		n.startAgent("--ip-blackhole-route", "--iptables-resync", "1")
	}
	c.converge(c.nodes...)
	for _, pair := range [][2]*pod{{p1, p2}, {p2, p1}} {
		if err := reachable(t, pair[0], pair[1]); err != nil {
			t.Fatalf("%v\n%s\nagent log:\n%s", err, netDump(n1.ns, n2.ns), n1.log())
		}
	}
	wantFwd := []string{
		"-A FORWARD -m comment --comment \"flanneld forward\" -j FLANNEL-FWD",
		"-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment \"flanneld forward\" -j ACCEPT",
		"-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment \"flanneld forward\" -j ACCEPT",
	}
	rulesIn := func(n *node) (bool, string) {
		out, err := n.iptables(false, "-S")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		for _, w := range wantFwd {
			if strings.Count(out, w) != 1 {
				return false, out
			}
		}
		return true, out
	}
	if ok, out := rulesIn(n1); !ok {
		t.Fatalf("iptables-nft -S on node1:\n%s\nwant exactly once each of:\n%s", out, strings.Join(wantFwd, "\n"))
	}

	// The device: Backend.MTU 1400 is the wire's; flannel.1 gets 1350.
	h1 := openH(t, n1.ns)
	l, err := h1.LinkByName("flannel.1")
	must(t, err)
	env, err := os.ReadFile(n1.subnetFile)
	must(t, err)
	if l.MTU != 1350 || !strings.Contains(string(env), "FLANNEL_MTU=1350\n") {
		t.Errorf("flannel.1 MTU %d, subnet file:\n%s\nwant 1350 (Backend.MTU 1400 - 50, as flanneld)", l.MTU, env)
	}

	// The blackhole route of the node's subnet.
	s1, _ := n1.state()
	hasBH := func() (bool, string) {
		ok, err := h1.HasBlackholeRoute(s1.Lease.Subnet)
		return ok && err == nil, fmt.Sprint(err, "\n", netDump(n1.ns))
	}
	waitUntil(t, "blackhole route of "+s1.Lease.Subnet.String(), hasBH)

	// Someone flushes FLANNEL-FWD, the masquerade table and the blackhole
	// route: all come back.
	if out, err := n1.iptables(false, "-F", "FLANNEL-FWD"); err != nil {
		t.Fatalf("iptables -F FLANNEL-FWD: %v\n%s", err, out)
	}
	if out, err := n1.iptables(false, "-D", "FORWARD", "-m", "comment", "--comment", "flanneld forward", "-j", "FLANNEL-FWD"); err != nil {
		t.Fatalf("iptables -D FORWARD: %v\n%s", err, out)
	}
	must(t, h1.NFT().DeleteOverlayMasq())
	must(t, h1.DeleteBlackholeRoute(s1.Lease.Subnet))
	waitUntil(t, "forward rules restored on node1", func() (bool, string) { return rulesIn(n1) })
	waitUntil(t, "blackhole route restored", hasBH)
	waitUntil(t, "masquerade restored", func() (bool, string) {
		rules, err := h1.NFT().OverlayMasq()
		return err == nil && len(rules) == 5, fmt.Sprint(rules, err)
	})
	if err := reachable(t, p1, p2); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
	if !strings.Contains(n1.log(), "restored") {
		t.Errorf("the agent did not log the restore:\n%s", n1.log())
	}
}
