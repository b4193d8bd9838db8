package portmap_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/store"
)

// Helpers of the portmap tests (names start with pm: other roles' tests
// share this package).

var pmRegistry = cniplug.NewRegistry(bridge.Role, hostlocal.Role, portmap.Role)

// pmNode is the test's node (the test process's private namespace) with a
// store directory, one bridge network and a "remote" host on a veth.
type pmNode struct {
	t       *testing.T
	dir     string
	network string
	bridge  string
	v4, v6  string // the pod subnets
	remote  string // netns path of the remote host
}

// The node's addresses on the link to the remote host, and the remote's.
var (
	pmNodeIP4   = netip.MustParseAddr("192.168.212.1")
	pmNodeIP6   = netip.MustParseAddr("fd00:212::1")
	pmRemoteIP4 = netip.MustParseAddr("192.168.212.2")
	pmRemoteIP6 = netip.MustParseAddr("fd00:212::2")
)

func newPMNode(t *testing.T) *pmNode {
	t.Helper()
	nstest.RequireRoot(t)
	n := &pmNode{t: t, dir: t.TempDir(), network: "pmnet", bridge: "cbxpm0",
		v4: "10.212.1.0/24", v6: "fd00:212:1::/64", remote: nstest.NewNS(t, "pmremote")}
	host, err := netops.Open("")
	pmMust(t, err)
	defer host.Close()
	// Without DAD on the node's new links: a link-local address still
	// tentative when the first packet is forwarded loses that packet (the
	// kernel's neighbour discovery, not portmap), which a test would see as
	// a flaky timeout.
	for _, k := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"} {
		old, err := host.Sysctl(k)
		pmMust(t, err)
		pmMust(t, host.SetSysctl(k, "0"))
		t.Cleanup(func() { h, _ := netops.Open(""); h.SetSysctl(k, old); h.Close() })
	}
	remote, err := netops.Open(n.remote)
	pmMust(t, err)
	defer remote.Close()
	_, _, err = host.EnsureVeth(netops.VethOpts{HostName: "pmlink0", PeerName: "eth0", Peer: remote})
	pmMust(t, err)
	t.Cleanup(func() { host, _ := netops.Open(""); host.DeleteLink("pmlink0"); host.Close() })
	for _, a := range []struct {
		h    *netops.Handle
		link string
		p    string
	}{
		{host, "pmlink0", "192.168.212.1/24"}, {host, "pmlink0", "fd00:212::1/64"},
		{remote, "eth0", "192.168.212.2/24"}, {remote, "eth0", "fd00:212::2/64"},
	} {
		pmMust(t, a.h.EnsureAddr(a.link, netip.MustParsePrefix(a.p), netops.AddrOpts{NoDAD: true}))
	}
	// A hostIP must be an address of the node, and the kernel makes an IPv6
	// address local only once the link has carrier, which it reports
	// asynchronously: wait for it.
	pmWaitLocal(t, host, pmNodeIP6)
	t.Cleanup(func() { host, _ := netops.Open(""); host.DeleteLink(n.bridge); host.Close() })
	return n
}

func pmMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pmPod is a pod: container ID and netns.
type pmPod struct{ id, netns string }

var pmSeq int

func (n *pmNode) newPod(name string) pmPod {
	pmSeq++
	return pmPod{id: fmt.Sprintf("%s-%d", name, pmSeq), netns: nstest.NewNS(n.t, "pmpod")}
}

// call runs one CNI call of role with conf on stdin.
func (n *pmNode) call(role *cniplug.Role, cmd string, p pmPod, conf []byte) ([]byte, error) {
	e := map[string]string{
		"CNI_COMMAND":     cmd,
		"CNI_CONTAINERID": p.id,
		"CNI_NETNS":       p.netns,
		"CNI_IFNAME":      "eth0",
		"CNI_PATH":        "/nonexistent",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.id,
		store.EnvDataDir:  n.dir,
	}
	if cmd == "GC" || cmd == "STATUS" {
		delete(e, "CNI_CONTAINERID")
		delete(e, "CNI_NETNS")
		delete(e, "CNI_IFNAME")
	}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv:   func(k string) string { return e[k] },
		Stdin:    bytes.NewReader(conf),
		Stderr:   &stderr,
		Registry: pmRegistry,
	})
	if err != nil {
		return out, fmt.Errorf("%w (stderr: %s)", err, stderr.String())
	}
	return out, nil
}

func (n *pmNode) must(role *cniplug.Role, cmd string, p pmPod, conf []byte) []byte {
	n.t.Helper()
	out, err := n.call(role, cmd, p, conf)
	if err != nil {
		n.t.Fatalf("%s %s %s: %v", role.Name, cmd, p.id, err)
	}
	return out
}

func (n *pmNode) bridgeConf(version string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"bridge","bridge":%q,"isGateway":true,"isDefaultGateway":true,"hairpinMode":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":%q}],[{"subnet":%q}]]}}`, version, n.network, n.bridge, n.v4, n.v6))
}

// pmMap is one portMappings entry.
type pmMap struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// portmapConf is the portmap plugin's config as libcni builds it: the
// network's name and version, the mappings in runtimeConfig, prevResult
// (when not nil) and extra fields.
func (n *pmNode) portmapConf(version string, maps []pmMap, prev []byte, extra map[string]any) []byte {
	m := map[string]any{"cniVersion": version, "name": n.network, "type": "portmap",
		"capabilities": map[string]bool{"portMappings": true}}
	if maps != nil {
		m["runtimeConfig"] = map[string]any{"portMappings": maps}
	}
	if prev != nil {
		m["prevResult"] = json.RawMessage(prev)
	}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// up runs ADD of the chain bridge -> portmap; it returns the bridge's
// result (prevResult of portmap) and checks that portmap returned it
// unchanged.
func (n *pmNode) up(p pmPod, version string, maps []pmMap, extra map[string]any) []byte {
	n.t.Helper()
	prev := n.must(bridge.Role, "ADD", p, n.bridgeConf(version))
	out := n.must(portmap.Role, "ADD", p, n.portmapConf(version, maps, prev, extra))
	if !pmJSONEqual(prev, out) {
		n.t.Errorf("portmap ADD changed the result:\n  got  %s\n  want %s", out, prev)
	}
	return prev
}

// down runs DEL of the chain (portmap, then bridge), twice each.
func (n *pmNode) down(p pmPod, version string, maps []pmMap, prev []byte) {
	n.t.Helper()
	for range 2 {
		n.must(portmap.Role, "DEL", p, n.portmapConf(version, maps, prev, nil))
	}
	for range 2 {
		n.must(bridge.Role, "DEL", p, n.bridgeConf(version))
	}
}

func pmJSONEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// podAddr returns the pod's address of a family from a bridge result.
func pmPodAddr(t *testing.T, res []byte, v4 bool) netip.Addr {
	t.Helper()
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	pmMust(t, json.Unmarshal(res, &r))
	for _, ip := range r.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err == nil && p.Addr().Is4() == v4 {
			return p.Addr()
		}
	}
	t.Fatalf("no IPv4=%v address in %s", v4, res)
	return netip.Addr{}
}

// serveHTTP runs an HTTP server on :port (both families) in the pod; it
// answers with the client's address as the pod sees it.
func pmServeHTTP(t *testing.T, p pmPod, port int) {
	t.Helper()
	var ln net.Listener
	pmMust(t, nstest.Run(t, p.netns, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s %s\n", p.id, host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// serveUDP runs a UDP echo server on :port in the pod.
func pmServeUDP(t *testing.T, p pmPod, port int) {
	t.Helper()
	var c net.PacketConn
	pmMust(t, nstest.Run(t, p.netns, func() error {
		var err error
		c, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}))
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte(p.id+" "), buf[:n]...), from)
		}
	}()
	t.Cleanup(func() { c.Close() })
}

// get fetches http://addr:port/ from namespace ns ("" = the node) and returns
// the body: "<pod id> <client address as the pod saw it>".
func pmGet(t *testing.T, ns string, addr netip.Addr, port int) (string, error) {
	t.Helper()
	var conn net.Conn
	dial := func() error {
		var err error
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(addr, uint16(port)).String(), 2*time.Second)
		return err
	}
	var err error
	if ns == "" {
		err = dial()
	} else {
		err = nstest.Run(t, ns, dial)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	return strings.TrimSpace(b.String()), err
}

// echoUDP sends a datagram from ns to addr:port and returns the answer.
func pmEchoUDP(t *testing.T, ns string, addr netip.Addr, port int) (string, error) {
	t.Helper()
	var c net.Conn
	if err := nstest.Run(t, ns, func() error {
		var err error
		c, err = net.Dial("udp", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// pmEntries returns the portmap elements on the node, by owner.
func pmEntries(t *testing.T) map[string]nft.PortMaps {
	t.Helper()
	h, err := netops.Open("")
	pmMust(t, err)
	defer h.Close()
	es, err := h.NFT().PortMapEntries()
	pmMust(t, err)
	out := map[string]nft.PortMaps{}
	for _, e := range es {
		out[e.Owner] = e
	}
	return out
}

// pmRecords returns the portmap records of the node's store, by container ID.
func (n *pmNode) records() map[string]portmap.Record {
	n.t.Helper()
	st, err := store.Open(n.dir)
	pmMust(n.t, err)
	defer st.Close()
	out := map[string]portmap.Record{}
	pmMust(n.t, portmap.Records.View(st, func(tx store.KindTx[portmap.Record]) error {
		rs, err := tx.List(n.network)
		for _, r := range rs {
			out[r.ContainerID] = r
		}
		return err
	}))
	return out
}

func pmOwnerOf(network string, p pmPod) string { return network + " " + p.id + " eth0" }

// withKeepPods returns conf with GC's valid attachments.
func pmWithKeep(t *testing.T, conf []byte, keep ...pmPod) []byte {
	t.Helper()
	var m map[string]any
	pmMust(t, json.Unmarshal(conf, &m))
	list := []types.GCAttachment{}
	for _, p := range keep {
		list = append(list, types.GCAttachment{ContainerID: p.id, IfName: "eth0"})
	}
	m["cni.dev/valid-attachments"] = list
	b, _ := json.Marshal(m)
	return b
}

// pmWaitLocal waits until the kernel takes a as an address of the node
// (IsLocalAddr), for at most 10 s.
func pmWaitLocal(t *testing.T, h *netops.Handle, a netip.Addr) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, err := h.IsLocalAddr(a)
		pmMust(t, err)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not an address of the node after 10 s", a)
		}
	}
}
