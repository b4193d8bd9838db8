package firewall_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
	"github.com/cnibox/cnibox/roles/portmap"
)

// nodeFile is the node's namespace (the test process's private one),
// opened before any test runs: /proc/self/ns/net is the main thread's, which
// a test's locked goroutine may have left in a pod's namespace.
var nodeFile, _ = os.Open("/proc/self/ns/net")

// nodeNS is a path to the node's namespace.
func nodeNS() string { return fmt.Sprintf("/proc/self/fd/%d", nodeFile.Fd()) }

// fwNet is one bridge network of the test's node, with a default route in
// its pods so that they reach the other network through the node.
type fwNet struct {
	*chaintest.Node
}

func newNet(t *testing.T, name string) *fwNet {
	n := chaintest.NewNode(t)
	n.Network = name
	return &fwNet{n}
}

func (n *fwNet) bridgeConf() []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":%q,"isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`, n.Network, n.Bridge, n.Subnet))
}

// pod adds a pod to the network (bridge only) and returns it, its ADD
// result and its address.
func (n *fwNet) pod(name string) (chaintest.Pod, []byte, netip.Addr) {
	p := n.NewPod(name)
	out := n.Must(bridge.Role, "ADD", p, n.bridgeConf())
	res := chaintest.Result(n.T, out, "1.0.0")
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	n.T.Cleanup(func() { n.Call(bridge.Role, "DEL", p, n.bridgeConf()) })
	return p, out, a.Unmap()
}

func (n *fwNet) fwConf(prev []byte, fields map[string]any) []byte {
	return n.Conf("1.0.0", "firewall", fields, prev)
}

// iptables runs iptables-nft in the test's node namespace (the test
// process's private one) and returns its output. It skips the test
// without root.
func iptables(t *testing.T, args ...string) string {
	t.Helper()
	nstest.RequireRoot(t)
	bin := nstest.RequireProgram(t, "iptables-nft", "iptables")
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-nft %v: %v: %s", args, err, out)
	}
	return string(out)
}

// resetNode removes every nftables table of the node namespace (the
// test's private one) at the test's end. It skips the test without root
// (a normal user's PATH may hold nft: Fedora, Arch and Ubuntu put sbin on
// it; without root there is no private namespace to flush).
func resetNode(t *testing.T) {
	t.Helper()
	nstest.RequireRoot(t)
	bin := nstest.RequireProgram(t, "nft", "nftables")
	// "flush ruleset" must never reach the machine's own namespace.
	if !nstest.InPrivateNetns() {
		t.Fatal("the test is not in the private namespace of nstest.MainInPrivateNetns: it would flush the machine's nftables ruleset")
	}
	t.Cleanup(func() { exec.Command(bin, "flush", "ruleset").Run() })
}

// TestForwardDropPolicy: with iptables-nft's FORWARD policy DROP (as Docker
// leaves it), pods on two bridges reach each other only once the firewall
// has let them through; the rules sit in iptables' own FORWARD (listed by
// iptables without warnings) behind the admin chain; CHECK passes, then
// fails after DEL (twice), and GC removes what the valid list lacks.
func TestForwardDropPolicy(t *testing.T) {
	resetNode(t)
	iptables(t, "-P", "FORWARD", "DROP")
	iptables(t, "-A", "FORWARD", "-j", "DROP") // a drop rule too, as some hosts have
	a, b := newNet(t, "fwa"), newNet(t, "fwb")
	pa, prevA, ipA := a.pod("fwa")
	pb, prevB, ipB := b.pod("fwb")
	if err := nstest.Probe(t, pa.Netns, pb.Netns, ipB, false); err == nil {
		t.Fatal("a reaches b through FORWARD policy DROP before the firewall")
	}
	confA, confB := a.fwConf(prevA, nil), b.fwConf(prevB, nil)
	for range 2 { // ADD repeated: same rules
		a.Must(firewall.Role, "ADD", pa, confA)
	}
	b.Must(firewall.Role, "ADD", pb, confB)
	if err := nstest.Reachable(t, pa.Netns, pb.Netns, ipB); err != nil {
		t.Errorf("a to b after the firewall: %v", err)
	}

	all := iptables(t, "-S")
	if strings.Contains(all, "incompatible") || strings.Contains(all, "Warning") {
		t.Errorf("iptables -S warns:\n%s", all)
	}
	fwd := iptables(t, "-S", "FORWARD")
	if !strings.HasPrefix(strings.SplitN(fwd, "\n", 3)[1], "-A FORWARD") || !strings.Contains(strings.SplitN(fwd, "\n", 3)[1], "-j CNI-FORWARD") {
		t.Errorf("FORWARD's first rule is not the jump to CNI-FORWARD:\n%s", fwd)
	}
	cf := iptables(t, "-S", "CNI-FORWARD")
	lines := strings.Split(strings.TrimSpace(cf), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "-j CNI-ADMIN") ||
		!strings.Contains(lines[2], "--mark 0x2000000/0x2000000") || !strings.HasSuffix(lines[2], "-j DROP") ||
		!strings.Contains(lines[3], "--mark 0x1000000/0x1000000") || !strings.HasSuffix(lines[3], "-j ACCEPT") {
		t.Errorf("CNI-FORWARD is not: the jump to CNI-ADMIN, the drop and the accept of the marks:\n%s", cf)
	}
	if n := strings.Count(fwMap(t, "pods4"), ipA.String()+" comment \"cnibox/"); n != 1 {
		t.Errorf("a's address is in map pods4 %d times after two ADDs:\n%s", n, fwMap(t, "pods4"))
	}
	iptables(t, "-A", "CNI-ADMIN", "-s", "192.0.2.9", "-j", "DROP") // an operator's rule

	a.Must(firewall.Role, "CHECK", pa, confA)
	for range 2 {
		a.Must(firewall.Role, "DEL", pa, confA)
	}
	waitMap(t, "pods4", func(m string) bool {
		return !strings.Contains(m, ipA.String()+" ") && strings.Contains(m, ipB.String()+" ")
	})
	if !strings.Contains(iptables(t, "-S", "CNI-ADMIN"), "192.0.2.9") {
		t.Error("the operator's rule in CNI-ADMIN is gone after DEL")
	}
	if _, err := a.Call(firewall.Role, "CHECK", pa, confA); err == nil {
		t.Error("CHECK passes after DEL")
	}

	// GC of network b with an empty valid list removes b's elements; a's
	// network's GC would not touch them.
	a.Must(firewall.Role, "ADD", pa, confA)
	a.Must(firewall.Role, "GC", pa, a.WithKeep(a.Conf("1.1.0", "firewall", nil, nil), pa))
	b.Must(firewall.Role, "GC", pb, b.WithKeep(b.Conf("1.1.0", "firewall", nil, nil)))
	waitMap(t, "pods4", func(m string) bool {
		return strings.Contains(m, ipA.String()+" ") && !strings.Contains(m, ipB.String()+" ")
	})
}

// fwMap lists a map of table inet cnibox-firewall.
func fwMap(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(nstest.RequireProgram(t, "nft", "nftables"), "list", "map", "inet", "cnibox-firewall", name).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list map inet cnibox-firewall %s: %v\n%s", name, err, out)
	}
	return string(out)
}

// waitMap waits until ok holds for the listing of map name: a removed
// element expires within a tick of the kernel's clock.
func waitMap(t *testing.T, name string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := fwMap(t, name)
		if ok(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("map %s is not as wanted:\n%s", name, m)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNoIptables: with no iptables table at all, the rules go into table
// cnibox-firewall and the pods reach each other; DEL with the pod's
// namespace gone removes them.
func TestNoIptables(t *testing.T) {
	resetNode(t)
	a, b := newNet(t, "fwna"), newNet(t, "fwnb")
	pa, prevA, _ := a.pod("fwna")
	pb, prevB, ipB := b.pod("fwnb")
	confA := a.fwConf(prevA, map[string]any{"iptablesAdminChainName": "MY-ADMIN"})
	a.Must(firewall.Role, "ADD", pa, confA)
	confB := b.fwConf(prevB, nil)
	b.Must(firewall.Role, "ADD", pb, confB)
	if err := nstest.Reachable(t, pa.Netns, pb.Netns, ipB); err != nil {
		t.Errorf("a to b: %v", err)
	}
	defer func() {
		// iptables' table appears (Docker starts): b's repeated ADD switches
		// the ip family to the marks, its element stays, its DEL removes it.
		iptables(t, "-P", "FORWARD", "DROP")
		b.Must(firewall.Role, "ADD", pb, confB)
		if cf := iptables(t, "-S", "CNI-FORWARD"); !strings.Contains(cf, "--mark 0x1000000/0x1000000") {
			t.Errorf("iptables' CNI-FORWARD after b's ADD under iptables' table:\n%s", cf)
		}
		b.Must(firewall.Role, "CHECK", pb, confB)
		b.Must(firewall.Role, "DEL", pb, confB)
		waitMap(t, "pods4", func(m string) bool { return !strings.Contains(m, ipB.String()+" ") })
	}()
	nft := nstest.RequireProgram(t, "nft", "nftables")
	out, err := exec.Command(nft, "list", "table", "inet", "cnibox-firewall").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "jump MY-ADMIN") || !strings.Contains(string(out), "hook forward") {
		t.Errorf("table inet cnibox-firewall: %v\n%s", err, out)
	}
	if out, _ := exec.Command(nft, "list", "table", "ip", "filter").CombinedOutput(); !strings.Contains(string(out), "No such file") {
		t.Errorf("an ip filter table appeared:\n%s", out)
	}
	a.Must(firewall.Role, "CHECK", pa, confA)
	for range 2 {
		a.Must(firewall.Role, "DEL", pa, confA, "CNI_NETNS", "")
	}
	if _, err := a.Call(firewall.Role, "CHECK", pa, confA); err == nil {
		t.Error("CHECK passes after DEL")
	}
}

// TestRefusals: prevResult is required, firewalld is not running (the
// system bus is a socket that does not exist).
func TestRefusals(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+t.TempDir()+"/no-bus")
	resetNode(t)
	a := newNet(t, "fwr")
	pa, prev, _ := a.pod("fwr")
	if _, err := a.Call(firewall.Role, "ADD", pa, a.fwConf(nil, nil)); chaintest.Code(err) != 7 {
		t.Errorf("ADD without prevResult = %v, want code 7", err)
	}
	if _, err := a.Call(firewall.Role, "ADD", pa, a.fwConf(prev, map[string]any{"backend": "firewalld"})); err == nil || !strings.Contains(err.Error(), "firewalld is not running") {
		t.Errorf("ADD with backend firewalld = %v", err)
	}
	if _, err := a.Call(firewall.Role, "STATUS", pa, a.Conf("1.1.0", "firewall", map[string]any{"backend": "firewalld"}, nil)); chaintest.Code(err) != 50 {
		t.Errorf("STATUS with backend firewalld = %v, want code 50", err)
	}
	a.Must(firewall.Role, "DEL", pa, a.fwConf(prev, map[string]any{"backend": "firewalld"}))
}

// TestIngressPolicy: two networks on two bridges, no iptables. a's network
// is same-bridge: b cannot open a connection to a, a still reaches b (its
// own connections), the node reaches a. Once b's network is same-bridge
// too, a cannot reach b either. An isolated pod c is reached from the node
// only. After DEL the isolation is gone.
func TestIngressPolicy(t *testing.T) {
	resetNode(t)
	a, b := newNet(t, "fwia"), newNet(t, "fwib")
	pa, prevA, ipA := a.pod("fwia")
	pb, prevB, ipB := b.pod("fwib")
	confA := a.fwConf(prevA, map[string]any{"ingressPolicy": "same-bridge"})
	a.Must(firewall.Role, "ADD", pa, confA)
	b.Must(firewall.Role, "ADD", pb, b.fwConf(prevB, map[string]any{"ingressPolicy": "open"}))
	a.Must(firewall.Role, "CHECK", pa, confA)
	if err := nstest.Probe(t, pb.Netns, pa.Netns, ipA, false); err == nil {
		t.Error("b reaches same-bridge a")
	}
	if err := nstest.Reachable(t, pa.Netns, pb.Netns, ipB); err != nil {
		t.Errorf("a to open b: %v", err)
	}
	if err := nstest.Reachable(t, nodeNS(), pa.Netns, ipA); err != nil {
		t.Errorf("the node to a: %v", err)
	}
	confB := b.fwConf(prevB, map[string]any{"ingressPolicy": "same-bridge"})
	b.Must(firewall.Role, "ADD", pb, confB)
	if err := nstest.Probe(t, pa.Netns, pb.Netns, ipB, false); err == nil {
		t.Error("a reaches b once both are same-bridge")
	}
	for range 2 {
		a.Must(firewall.Role, "DEL", pa, confA)
	}
	if err := nstest.Reachable(t, pb.Netns, pa.Netns, ipA); err != nil {
		t.Errorf("b to a after a's DEL: %v", err)
	}

	c := newNet(t, "fwic")
	pc, prevC, ipC := c.pod("fwic")
	c.Must(firewall.Role, "ADD", pc, c.fwConf(prevC, map[string]any{"ingressPolicy": "isolated"}))
	if err := nstest.Reachable(t, nodeNS(), pc.Netns, ipC); err != nil {
		t.Errorf("the node to isolated c: %v", err)
	}
	if err := nstest.Probe(t, pb.Netns, pc.Netns, ipC, false); err == nil {
		t.Error("b reaches isolated c")
	}
}

// TestConcurrentFirstAdds: first ADDs of several pods at once leave one jump
// from FORWARD and one to the admin chain.
func TestConcurrentFirstAdds(t *testing.T) {
	resetNode(t)
	iptables(t, "-P", "FORWARD", "DROP")
	n := newNet(t, "fwcc")
	var confs [][]byte
	var pods []chaintest.Pod
	for i := range 4 {
		p, prev, _ := n.pod(fmt.Sprintf("fwcc%d", i))
		pods, confs = append(pods, p), append(confs, n.fwConf(prev, nil))
	}
	errs := make(chan error, len(pods))
	for i := range pods {
		go func() { _, err := n.Call(firewall.Role, "ADD", pods[i], confs[i]); errs <- err }()
	}
	for range pods {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if c := strings.Count(iptables(t, "-S", "FORWARD"), "-j CNI-FORWARD"); c != 1 {
		t.Errorf("%d jumps to CNI-FORWARD", c)
	}
	if c := strings.Count(iptables(t, "-S", "CNI-FORWARD"), "-j CNI-ADMIN"); c != 1 {
		t.Errorf("%d jumps to CNI-ADMIN", c)
	}
	for i := range pods {
		n.Must(firewall.Role, "CHECK", pods[i], confs[i])
	}
}

// TestPortForwardUnderDrop: under FORWARD policy DROP, a port portmap
// forwards to a pod is reached from a pod of another bridge that has no
// firewall rules of its own (the DNAT accept).
func TestPortForwardUnderDrop(t *testing.T) {
	resetNode(t)
	iptables(t, "-P", "FORWARD", "DROP")
	a, b := newNet(t, "fwpa"), newNet(t, "fwpb")
	pa, prevA, _ := a.pod("fwpa")
	pb, _, _ := b.pod("fwpb")
	pm := a.Conf("1.0.0", "portmap", map[string]any{
		"capabilities":  map[string]bool{"portMappings": true},
		"runtimeConfig": map[string]any{"portMappings": []map[string]any{{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}}},
	}, prevA)
	a.Must(portmap.Role, "ADD", pa, pm)
	t.Cleanup(func() { a.Call(portmap.Role, "DEL", pa, pm) })
	a.Must(firewall.Role, "ADD", pa, a.fwConf(prevA, nil))

	var ln net.Listener
	if err := nstest.Run(t, pa.Netns, func() (err error) { ln, err = net.Listen("tcp", ":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go nstest.Greet(ln)
	gw := strings.TrimSuffix(b.Subnet, "0/24") + "1"
	err := nstest.Run(t, pb.Netns, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(gw, "18080"), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(c, buf)
		return err
	})
	if err != nil {
		t.Errorf("b to a's forwarded port %s:18080 under DROP: %v", gw, err)
	}
}
