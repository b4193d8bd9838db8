package overlay

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/internal/flanneld"
)

// The rolling move from flannel: a cnibox node and a flanneld v0.28.9 node
// (test/internal/flanneld, built before the test enters its namespace) on
// the same backend and the same lease store reach each other's pods, both
// ways; when the flanneld node leaves, the cnibox node drops it.

// flanneldBin is flanneld's path, found (or built) by TestMain before the
// test process enters its private namespace; "" when it could not be.
var flanneldBin, flanneldErr = "", error(nil)

// findFlanneld finds flanneld, building it the first time in the machine's
// namespace (it needs the module proxy), and hands its directory to the
// re-executed test process through flanneld.DirEnv.
func findFlanneld() {
	if nstest.InPrivateNetns() || !testenv.Root() {
		if d := os.Getenv(flanneld.DirEnv); d != "" {
			flanneldBin = filepath.Join(d, "flanneld")
		} else {
			flanneldErr = fmt.Errorf("it was not built before the tests entered their namespace")
		}
		return
	}
	dir, err := flanneld.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "overlay: no flanneld for the side-by-side tests:", err)
		return
	}
	os.Setenv(flanneld.DirEnv, dir)
}

// flannelStops stop each node's flanneld.
var flannelStops = map[*node]func(){}

// flanneldPath returns flanneld or skips the test saying why there is none.
func flanneldPath(t *testing.T) string {
	t.Helper()
	if flanneldBin == "" {
		t.Skipf("no flanneld %s: %v (go run ./test/internal/flanneld/build builds it into the user's cache)", flanneld.Version, flanneldErr)
	}
	return flanneldBin
}

// compatBackends are the backends run side by side, with what the kernel
// needs for each (checked first: on a kernel without it the case skips,
// naming make test-kernel).
var compatBackends = []struct {
	name, backend string
	need          func(h *netops.Handle) error
}{
	{"vxlan", `{"Type": "vxlan"}`, nil},
	{"vxlan-direct", `{"Type": "vxlan", "DirectRouting": true}`, nil},
	{"host-gw", `{"Type": "host-gw"}`, nil},
	{"wireguard", `{"Type": "wireguard", "PersistentKeepaliveInterval": 25}`, func(h *netops.Handle) error {
		_, err := h.EnsureWireGuard("wg-probe", 1420)
		return err
	}},
	{"ipip", `{"Type": "ipip"}`, func(h *netops.Handle) error {
		_, err := h.EnsureIPIP(netops.IPIPOpts{Name: "ipip-probe", Local: netip.MustParseAddr("192.0.2.1"), MTU: 1480})
		return err
	}},
}

// kernelHas skips the test when the kernel lacks what need creates.
func kernelHas(t *testing.T, what string, need func(*netops.Handle) error) {
	t.Helper()
	if need == nil {
		return
	}
	h := openH(t, nstest.NewNS(t, "probe"))
	nstest.SkipIfKernelLacks(t, what+" devices", need(h))
}

// startFlanneld runs flanneld in the node's namespace with flags (its
// lease store's) and its key file in the node's own directory; it is
// stopped with SIGTERM at the end.
func (n *node) startFlanneld(t *testing.T, bin string, flags ...string) {
	t.Helper()
	args := append(flags, "--iface=eth0", "--subnet-file="+n.subnetFile, "--ip-masq", "-v=2")
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	fmt.Fprintf(f, "----- flanneld %v\n", args)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "WIREGUARD_KEY_FILE="+filepath.Join(n.dataDir, "wgkey"), "NODE_NAME="+n.name)
	cmd.Stdout, cmd.Stderr = f, f
	if err := startIn(t, n.ns, cmd); err != nil {
		t.Fatalf("start flanneld on %s: %v", n.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	stop := func() {
		if cmd.Process == nil {
			return
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		cmd.Process = nil
	}
	flannelStops[n] = stop
	t.Cleanup(stop)
}

// waitSubnetFile waits until the node's subnet file exists.
func (n *node) waitSubnetFile(t *testing.T) {
	t.Helper()
	eventually(t, n.name+"'s subnet file", func() string {
		if _, err := os.Stat(n.subnetFile); err != nil {
			return fmt.Sprintf("%v; log:\n%s", err, n.log())
		}
		return ""
	})
}

// TestFlanneldEtcd: per backend, node1 runs cnibox-agent and node2
// flanneld v0.28.9 on one etcd; their pods reach each other both ways, and
// when flanneld's node leaves (its lease deleted) cnibox drops it.
func TestFlanneldEtcd(t *testing.T) {
	for _, be := range compatBackends {
		t.Run(be.name, func(t *testing.T) {
			if nstest.InTestKernel() && be.need == nil {
				t.Skip("runs on the host (make test); the test kernel runs what the host's kernel lacks")
			}
			kernelHas(t, be.name, be.need)
			bin := flanneldPath(t)
			c := newCluster(t, 2)
			c.startEtcd()
			c.flannelConf()
			c.put(etcdPrefix+"/config", `{"Network": "10.244.0.0/16", "Backend": `+be.backend+`}`)
			n1, n2 := c.nodes[0], c.nodes[1]
			n1.env = []string{"WIREGUARD_KEY_FILE=" + filepath.Join(n1.dataDir, "wgkey")}
			n1.startAgent()
			n2.startFlanneld(t, bin, "--etcd-endpoints=http://"+etcdAddr+":2379", "--etcd-prefix="+etcdPrefix)
			n1.waitSubnetFile(t)
			n2.waitSubnetFile(t)
			compat(t, c, be.name, func() { del(t, c, flanneldSubnet(t, n2)) })
		})
	}
}

// flanneldSubnet reads the subnet flanneld wrote into node n's subnet file.
func flanneldSubnet(t *testing.T, n *node) netip.Prefix {
	t.Helper()
	for _, line := range strings.Split(readFile(t, n.subnetFile), "\n") {
		if v, ok := strings.CutPrefix(line, "FLANNEL_SUBNET="); ok {
			return netip.MustParsePrefix(v).Masked()
		}
	}
	t.Fatalf("no FLANNEL_SUBNET in %s", n.subnetFile)
	return netip.Prefix{}
}

// compat adds a pod on each node, checks both directions, then makes the
// flanneld node leave (leave: stop flanneld first) and checks that the
// cnibox node no longer routes its subnet.
func compat(t *testing.T, c *cluster, backend string, leave func()) {
	t.Helper()
	n1, n2 := c.nodes[0], c.nodes[1]
	p1, err := n1.addPod("cnibox")
	if err != nil {
		t.Fatalf("ADD on the cnibox node: %v\n%s", err, n1.log())
	}
	p2, err := n2.addPod("flannel")
	if err != nil {
		t.Fatalf("ADD on the flanneld node: %v\n%s", err, n2.log())
	}
	for _, pair := range [][2]*pod{{p1, p2}, {p2, p1}} {
		if err := reachable(t, pair[0], pair[1]); err != nil {
			t.Fatalf("%s: %v\ncnibox node's log:\n%s\nflanneld node's log:\n%s\n%s", backend, err, n1.log(), n2.log(), netDump(n1.ns, n2.ns))
		}
	}
	sn2 := flanneldSubnet(t, n2)
	flannelStops[n2]()
	leave()
	eventually(t, "the cnibox node after flanneld's node left", func() string {
		h := openH(t, n1.ns)
		routes, err := h.Routes("")
		if err != nil {
			return err.Error()
		}
		for _, r := range routes {
			if r.Dst == sn2 {
				return fmt.Sprintf("still routes %s: %s", sn2, r)
			}
		}
		return ""
	}, n1.ns)
	if err := nstest.Probe(t, p1.ns, p2.ns, p2.ip, false); err == nil {
		t.Errorf("%s: the pod on the node that left is still reachable", backend)
	}
}
