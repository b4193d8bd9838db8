//go:build kube

package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

const (
	// kindConflist is kind's default network as kindnetd writes it (ptp +
	// host-local + portmap, cniVersion 0.3.1); examples/ has it.
	kindConflist = "../../examples/41-ptp.conflist"
	kindNetwork  = "kindnet"
	kindSubnet   = "10.244.0.0/24"
	hostPort     = 30080
	podPort      = 8080
)

// TestKubeNodeKind is kind's network driven through containerd 1.6's CRI,
// the way the kubelet drives it: containerd (test/kube/node.sh cri) with
// kind's conflist as its only network config and cnibox linked as ptp,
// host-local, portmap and loopback. Two pod sandboxes get addresses in the
// subnet; the node routes each by a /32 route to its host veth; the pods
// reach each other and the node reaches them; a hostPort (the CRI's
// PortMapping) answers on the node's address, from the node itself and from
// the host at the other end of its NIC; and stopping (twice) and removing
// the sandboxes, which makes containerd run DEL three times (the last two
// without the namespace), leaves no route, veth, portmap element or store
// record, and no CNI call failed.
func TestKubeNodeKind(t *testing.T) {
	conf, err := os.ReadFile(kindConflist)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := startCRINode(t, string(conf), "ptp", "host-local", "portmap", "loopback")
	t.Logf("containerd is up after %v (dir %s)", time.Since(start).Round(100*time.Millisecond), c.dir)

	a := c.runSandbox("kind-a", &runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: podPort, HostPort: hostPort})
	b := c.runSandbox("kind-b")
	subnet := netip.MustParsePrefix(kindSubnet)
	ips := map[string]netip.Addr{}
	for _, s := range []sandbox{a, b} {
		ip, err := netip.ParseAddr(s.ip)
		if err != nil || !subnet.Contains(ip) {
			t.Fatalf("sandbox %s: the CRI reports the address %q, want one in %s", s.name, s.ip, subnet)
		}
		ips[s.name] = ip
		t.Logf("sandbox %s: %s, netns %s", s.name, ip, s.netns)
	}
	if ips[a.name] == ips[b.name] {
		t.Fatalf("both sandboxes have %s", ips[a.name])
	}

	// the node: a /32 route to each pod via its host veth
	for _, s := range []sandbox{a, b} {
		if dev := c.hostRoute(ips[s.name]); !strings.HasPrefix(dev, "cbx") {
			t.Fatalf("the node has no /32 route to %s (%s) via a host veth: %q", s.name, ips[s.name], dev)
		}
	}
	// the pods reach each other (ICMP and TCP), the node reaches them
	podA, err := netops.Open(a.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer podA.Close()
	if _, err := podA.Ping(ips[b.name], 5*time.Second); err != nil {
		t.Errorf("pod %s cannot ping pod %s: %v", a.name, b.name, err)
	}
	if err := nstest.Reachable(t, a.netns, b.netns, ips[b.name]); err != nil {
		t.Errorf("pod %s to pod %s: %v", a.name, b.name, err)
	}
	if err := nstest.Reachable(t, b.netns, a.netns, ips[a.name]); err != nil {
		t.Errorf("pod %s to pod %s: %v", b.name, a.name, err)
	}
	if err := nstest.Reachable(t, c.nodeNS(), b.netns, ips[b.name]); err != nil {
		t.Errorf("the node to pod %s: %v", b.name, err)
	}

	// the hostPort: node IP:hostPort reaches the pod's port, from another
	// host (the uplink) and from the node itself
	stop := c.serve(a, podPort)
	defer stop()
	hp := netip.AddrPortFrom(netip.MustParseAddr(nodeIP), hostPort)
	for from, ns := range map[string]string{"the uplink host": c.uplinkNS(), "the node": c.nodeNS()} {
		if got, err := greeting(t, ns, hp); err != nil || got != a.name {
			t.Errorf("%s to the hostPort %s: got %q, %v; want pod %s's greeting", from, hp, got, err, a.name)
		}
	}
	if t.Failed() {
		return
	}

	// what the node's store and nftables hold while the pods run
	reserved, endpoints := nodeState(t, c.node)
	for _, s := range []sandbox{a, b} {
		k := kindNetwork + " eth0 default/" + s.name
		if !reserved[k] || !endpoints[k] {
			t.Fatalf("the store lacks %q (reserved %v, endpoint %v): %v %v", k, reserved[k], endpoints[k], reserved, endpoints)
		}
	}
	if rules := c.portmapRules(); !strings.Contains(rules, fmt.Sprint(hostPort)) || !strings.Contains(rules, a.id) {
		t.Fatalf("nft list table inet cnibox-portmap lacks the hostPort %d of %s:\n%s", hostPort, a.id, rules)
	}

	stop()
	for _, s := range []sandbox{a, b} {
		c.removeSandbox(s)
	}
	c.poll("nothing left of the removed sandboxes", func() error {
		for _, s := range []sandbox{a, b} {
			if dev := c.hostRoute(ips[s.name]); dev != "" {
				return fmt.Errorf("the /32 route to %s (%s) via %s is left", s.name, ips[s.name], dev)
			}
		}
		if veths := c.onNodeMust("ip", "-o", "link", "show", "type", "veth"); strings.Contains(veths, "cbx") {
			return fmt.Errorf("host veths are left:\n%s", veths)
		}
		if rules := c.portmapRules(); strings.Contains(rules, fmt.Sprint(hostPort)) || strings.Contains(rules, a.id) {
			return fmt.Errorf("the portmap elements are left:\n%s", rules)
		}
		reserved, endpoints := nodeState(t, c.node)
		if len(reserved) > 0 || len(endpoints) > 0 {
			return fmt.Errorf("the store still holds reservations %v, endpoints %v", reserved, endpoints)
		}
		return nil
	})
	// every CNI call succeeded, and each sandbox's plugins got DEL more
	// than once, the last time without its namespace
	for _, s := range []sandbox{a, b} {
		c.checkCalls(s)
	}
	t.Logf("kind's network through the CRI took %v", time.Since(start).Round(100*time.Millisecond))
}

// checkCalls reads the records cnibox's log on the node holds for the
// sandbox (`cnibox logs --container ID --json`): no call failed; ptp and
// portmap each got one ADD and at least two DELs, the last without
// CNI_NETNS (containerd removed the namespace at the first stop).
func (c *criNode) checkCalls(s sandbox) {
	c.t.Helper()
	out, err := c.onNode(filepath.Join(c.hostDir("/opt/cni/bin"), "cnibox"), "logs", "--container", s.id, "--json")
	if err != nil {
		c.t.Fatalf("cnibox logs on the node: %v", err)
	}
	calls := map[string][]map[string]any{}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			c.t.Fatalf("cnibox logs --json: %v: %q", err, line)
		}
		if rec["msg"] == "error" {
			c.t.Errorf("sandbox %s: a CNI call failed: %s", s.name, line)
		}
		role, cmd := fmt.Sprint(rec["role"]), fmt.Sprint(rec["command"])
		calls[role+" "+cmd] = append(calls[role+" "+cmd], rec)
		lines = append(lines, role+" "+cmd+" netns="+fmt.Sprint(rec["netns"]))
	}
	for _, role := range []string{"ptp", "portmap"} {
		adds, dels := calls[role+" ADD"], calls[role+" DEL"]
		if len(adds) != 1 || len(dels) < 2 {
			c.t.Errorf("sandbox %s: %s got %d ADD and %d DEL, want 1 and at least 2: %v", s.name, role, len(adds), len(dels), lines)
			continue
		}
		if ns, _ := dels[len(dels)-1]["netns"].(string); ns != "" {
			c.t.Errorf("sandbox %s: %s's last DEL had the netns %q, want none (the sandbox was stopped before): %v", s.name, role, ns, lines)
		}
	}
	c.t.Logf("sandbox %s: CNI calls %v", s.name, lines)
}

// hostRoute returns the device of the node's /32 route to ip ("" for none),
// as `ip route show exact IP/32` on the node shows it.
func (c *criNode) hostRoute(ip netip.Addr) string {
	c.t.Helper()
	out := strings.Fields(c.onNodeMust("ip", "-4", "-o", "route", "show", "exact", ip.String()+"/32"))
	for i, f := range out {
		if f == "dev" && i+1 < len(out) {
			return out[i+1]
		}
	}
	return ""
}

// portmapRules is `nft list table inet cnibox-portmap` on the node ("" when
// there is no such table).
func (c *criNode) portmapRules() string {
	c.t.Helper()
	out, err := c.onNode("nft", "list", "table", "inet", "cnibox-portmap")
	if err != nil && !strings.Contains(err.Error(), "No such file") {
		c.t.Fatalf("nft list table inet cnibox-portmap: %v", err)
	}
	return out
}

func (c *criNode) onNodeMust(args ...string) string {
	c.t.Helper()
	out, err := c.onNode(args...)
	if err != nil {
		c.t.Fatalf("%s on the node: %v", strings.Join(args, " "), err)
	}
	return out
}

// serve listens on port in the sandbox's network namespace (as a container
// of the pod would) and greets every connection with the sandbox's name;
// the returned func stops it.
func (c *criNode) serve(s sandbox, port int) func() {
	c.t.Helper()
	var ln net.Listener
	if err := nstest.Run(c.t, s.netns, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		c.t.Fatalf("listen on :%d in %s: %v", port, s.name, err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte(s.name))
			conn.Close()
		}
	}()
	return func() { ln.Close() }
}

// greeting connects from the namespace ns to to and returns what the
// server says before it closes. The dial may take 10 s (TCP's SYN
// retries).
func greeting(t *testing.T, ns string, to netip.AddrPort) (string, error) {
	var got []byte
	err := nstest.Run(t, ns, func() error {
		conn, err := net.DialTimeout("tcp", to.String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err = io.ReadAll(conn)
		return err
	})
	return string(got), err
}
