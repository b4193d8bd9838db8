package wireguard

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/backend/backendtest"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/netops/wg"
)

func TestMain(m *testing.M) { nstest.MainInPrivateNetns(m) }

// newBackend makes n's backend with its own key file.
func newBackend(t *testing.T, n *backendtest.Node, keyFile string) *Backend {
	t.Helper()
	b, err := New(n.Env)
	if err != nil {
		t.Fatal(err)
	}
	b.keyFile = keyFile
	return b
}

func device(t *testing.T, n *backendtest.Node, name string) wg.Device {
	t.Helper()
	c, err := wg.Open(n.H)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestWireGuardTwoNodes: two nodes with flannel's defaults (Mode separate,
// port 51820, the key in the key file) publish flannel's backend data,
// reach each other's subnets through flannel-wg, keep their key across a
// restart, and drop a peer at once when its lease goes, also a peer left
// over from before (a sync).
func TestWireGuardTwoNodes(t *testing.T) {
	nodes := backendtest.TwoNodes(t, `{"Network": "10.244.0.0/16", "Backend": {"Type": "wireguard", "PersistentKeepaliveInterval": 25}}`)
	dir := t.TempDir()
	var bs [2]*Backend
	for i, n := range nodes {
		bs[i] = newBackend(t, n, filepath.Join(dir, "run", "flannel", "wgkey"+string(rune('1'+i))))
		n.Start(t, bs[i])
	}
	n1, n2 := nodes[0], nodes[1]

	// The key file: written 0400, and the published key is its public key.
	st, err := os.Stat(bs[0].keyFile)
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("key file %s: %v, %v; want mode 0400", bs[0].keyFile, st, err)
	}
	var d Data
	if err := json.Unmarshal(n1.Lease.Attrs.Data, &d); err != nil || d.Port != 51820 || d.PublicKey != bs[0].priv.PublicKey().String() {
		t.Fatalf("node1 publishes %s (%v); want {\"PublicKey\": its key, \"Port\": 51820}", n1.Lease.Attrs.Data, err)
	}
	if n1.Lease.Attrs.BackendType != "wireguard" || n1.Lease.Attrs.Data6 != nil {
		t.Errorf("node1 publishes type %q, v6 data %s; want wireguard without IPv6 data", n1.Lease.Attrs.BackendType, n1.Lease.Attrs.Data6)
	}

	// With a keepalive, adding a peer sends a handshake initiation at
	// once. Two nodes that add each other within one round trip send
	// crossing initiations, each of which resets the other's handshake;
	// WireGuard sorts that out after its 5 s rekey timeout with jitter, but
	// under the test kernel's emulation the retries crossed again for more
	// than the 10 s this test waits (both sides: 2 initiations received, 2
	// responses sent, no handshake). So node2 adds node1 once node1's first
	// initiation is out (and dropped by node2, which does not know node1
	// yet), as nodes that do not start in the same millisecond do.
	must(t, bs[0].Add(n1.H, n2.Lease, nil))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ps := device(t, n1, Device).Peers; len(ps) == 1 && ps[0].TxBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node1 sent no handshake to node2 with a keepalive set: %+v", device(t, n1, Device).Peers)
		}
	}
	must(t, bs[1].Add(n2.H, n1.Lease, nil))

	dev := device(t, n1, Device)
	if dev.ListenPort != 51820 || len(dev.Peers) != 1 {
		t.Fatalf("node1's %s: port %d, peers %+v; want 51820 and node2", Device, dev.ListenPort, dev.Peers)
	}
	p := dev.Peers[0]
	if p.PublicKey != bs[1].priv.PublicKey() || p.Endpoint != netip.MustParseAddrPort("192.168.78.2:51820") ||
		len(p.AllowedIPs) != 1 || p.AllowedIPs[0] != n2.Lease.Subnet || p.Keepalive != 25*time.Second {
		t.Errorf("node1's peer = %+v; want node2's key at 192.168.78.2:51820 allowed %s, keepalive 25s", p, n2.Lease.Subnet)
	}
	l, err := n1.H.LinkByName(Device)
	must(t, err)
	if l.MTU != 1420 || !l.Up {
		t.Errorf("%s mtu %d up %v; want 1420 (1500 - 80), up", Device, l.MTU, l.Up)
	}
	routes, err := n1.H.Routes(Device)
	must(t, err)
	if !hasRoute(routes, netip.MustParsePrefix("10.244.0.0/16")) {
		t.Errorf("node1's routes on %s = %v; want 10.244.0.0/16 scope link", Device, routes)
	}
	for _, pair := range [][2]*backendtest.Node{{n1, n2}, {n2, n1}} {
		to := pair[1].Lease.Subnet.Addr()
		if err := backendtest.Reachable(t, pair[0], pair[1], to); err != nil {
			t.Fatalf("through the tunnel to %s: %v\nnode1's peers %+v\nnode2's peers %+v", to, err, device(t, n1, Device).Peers, device(t, n2, Device).Peers)
		}
	}

	// A restart keeps the key (the key file) and the peers.
	again := newBackend(t, n1, bs[0].keyFile)
	n1.Start(t, again)
	if again.priv != bs[0].priv || len(device(t, n1, Device).Peers) != 1 {
		t.Errorf("after a restart: key changed %v, peers %+v", again.priv != bs[0].priv, device(t, n1, Device).Peers)
	}

	// A stale peer (a node gone while nobody looked) goes with a sync;
	// the live one stays.
	c, err := wg.Open(n1.H)
	must(t, err)
	defer c.Close()
	stale, _ := wg.GenerateKey()
	must(t, c.SetPeers(Device, []wg.Peer{{PublicKey: stale.PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.9.0/24")}}}))
	removed, added, err := again.Sync(n1.H, []lease.Lease{n2.Lease})
	if err != nil || removed != 1 || added != 0 {
		t.Errorf("Sync = removed %d, added %d, %v; want the stale peer removed, nothing added", removed, added, err)
	}
	// A peer whose lease goes is removed at once.
	must(t, again.Remove(n1.H, n2.Lease))
	if ps := device(t, n1, Device).Peers; len(ps) != 0 {
		t.Errorf("peers after the lease went: %+v; want none", ps)
	}
	if err := backendtest.Reachable(t, n1, n2, n2.Lease.Subnet.Addr()); err == nil {
		t.Error("node2's subnet is still reachable without its peer")
	}
}

// testPSK is a preshared key as `wg genpsk` prints one.
const testPSK = "mMiHW8VpRyNqm6GQMBz0qj3rEBcbxBsV/mfwKo1OB0w="

// TestWireGuardDualStack: every Mode of flannel's on a dual-stack network,
// with a PSK. Mode separate makes flannel-wg-v6 on ListenPortV6 for IPv6
// beside flannel-wg; the other modes one device whose peer is allowed both
// subnets: auto at the IPv4 endpoint between private addresses (flannel's
// selectMode), ipv4 at the IPv4 one, ipv6 at the IPv6 one. Every peer
// carries the PSK, and both families reach the other node.
func TestWireGuardDualStack(t *testing.T) {
	const conf = `{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "wireguard", "Mode": %q, "PSK": %q}}`
	psk, err := wg.ParseKey(testPSK)
	must(t, err)
	for _, mode := range []string{"separate", "auto", "ipv4", "ipv6"} {
		t.Run(mode, func(t *testing.T) {
			nodes := backendtest.TwoNodes(t, fmt.Sprintf(conf, mode, testPSK))
			dir := t.TempDir()
			var bs [2]*Backend
			for i, n := range nodes {
				bs[i] = newBackend(t, n, filepath.Join(dir, "key"+string(rune('1'+i))))
				n.Start(t, bs[i])
			}
			must(t, bs[0].Add(nodes[0].H, nodes[1].Lease, nil))
			must(t, bs[1].Add(nodes[1].H, nodes[0].Lease, nil))
			// the endpoint of node1's one peer in the one-device modes
			wantEP := map[string]netip.Addr{"auto": netip.MustParseAddr("192.168.78.2"), "ipv4": netip.MustParseAddr("192.168.78.2"),
				"ipv6": netip.MustParseAddr("fd00:78::2")}[mode]
			if mode == "separate" {
				d6 := device(t, nodes[0], Device6)
				if d6.ListenPort != 51821 || len(d6.Peers) != 1 || d6.Peers[0].Endpoint != netip.MustParseAddrPort("[fd00:78::2]:51821") {
					t.Errorf("%s: port %d peers %+v; want 51821 and node2 at [fd00:78::2]:51821", Device6, d6.ListenPort, d6.Peers)
				}
			} else {
				d := device(t, nodes[0], Device)
				port := device(t, nodes[1], Device).ListenPort
				if len(bs[0].Devices()) != 1 || len(d.Peers) != 1 || len(d.Peers[0].AllowedIPs) != 2 ||
					d.Peers[0].Endpoint != netip.AddrPortFrom(wantEP, uint16(port)) {
					t.Errorf("Mode %s: devices %v, peers %+v; want one device, node2 allowed both subnets at %s port %d (where node2 listens)",
						mode, bs[0].Devices(), d.Peers, wantEP, port)
				}
			}
			for _, name := range bs[0].Devices() {
				for _, p := range device(t, nodes[0], name).Peers {
					if p.PresharedKey == nil || *p.PresharedKey != psk {
						t.Errorf("%s: peer %s has preshared key %v; want Backend.PSK", name, p.PublicKey, p.PresharedKey)
					}
				}
			}
			for _, a := range []netip.Addr{nodes[1].Lease.Subnet.Addr(), nodes[1].Lease.Subnet6.Addr()} {
				if err := backendtest.Reachable(t, nodes[0], nodes[1], a); err != nil {
					t.Errorf("to %s: %v", a, err)
				}
			}
		})
	}
}

// TestWireGuardPSKMismatch: a node whose PSK differs from its peer's
// makes no handshake with it, so the PSK is in force, not only written.
func TestWireGuardPSKMismatch(t *testing.T) {
	nodes := backendtest.TwoNodes(t, fmt.Sprintf(`{"Network": "10.244.0.0/16", "Backend": {"Type": "wireguard", "PSK": %q}}`, testPSK))
	dir := t.TempDir()
	var bs [2]*Backend
	for i, n := range nodes {
		bs[i] = newBackend(t, n, filepath.Join(dir, "key"+string(rune('1'+i))))
	}
	other, err := wg.GenerateKey() // any 32 bytes serve as a PSK
	must(t, err)
	bs[1].psk = &other
	for i, n := range nodes {
		n.Start(t, bs[i])
	}
	must(t, bs[0].Add(nodes[0].H, nodes[1].Lease, nil))
	must(t, bs[1].Add(nodes[1].H, nodes[0].Lease, nil))
	if err := backendtest.Reachable(t, nodes[0], nodes[1], nodes[1].Lease.Subnet.Addr()); err == nil {
		t.Errorf("node1 reached node2's subnet with PSKs that differ; node1's peers %+v", device(t, nodes[0], Device).Peers)
	}
	if ps := device(t, nodes[0], Device).Peers; len(ps) != 1 || !ps[0].LastHandshake.IsZero() {
		t.Errorf("node1's peers %+v; want node2 without a handshake", ps)
	}
}

func hasRoute(rs []netops.Route, dst netip.Prefix) bool {
	for _, r := range rs {
		if r.Dst == dst && r.ScopeLink {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
