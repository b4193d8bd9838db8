package e2e

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

func repoFile(parts ...string) string {
	return filepath.Join(append([]string{"..", ".."}, parts...)...)
}

// TestBridgeHostLocalEveryVersion runs the default example network through
// libcni at every spec version: two pods get distinct addresses, reach each
// other through the bridge, CHECK passes, DEL twice leaves nothing behind.
func TestBridgeHostLocalEveryVersion(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			l := withVersion(t, loadList(t, repoFile("examples", "10-bridge.conflist")), v)
			a, b := e.newPod("a"), e.newPod("b")
			ra, rb := e.add(l, a), e.add(l, b)
			ipa, ipb := podIP(t, ra, true), podIP(t, rb, true)
			subnet := netip.MustParsePrefix("10.88.7.0/24")
			if ipa == ipb || !subnet.Contains(ipa) || !subnet.Contains(ipb) {
				t.Fatalf("pod addresses %s and %s: want two distinct addresses in %s", ipa, ipb, subnet)
			}
			if len(ra.Interfaces) != 3 || ra.Interfaces[2].Sandbox != a.netns {
				t.Errorf("ADD result interfaces = %+v, want bridge, host veth, eth0 in %s", ra.Interfaces, a.netns)
			}
			if err := reachable(t, a.netns, b.netns, ipb); err != nil {
				t.Fatalf("pod a cannot reach pod b at %s: %v", ipb, err)
			}
			if err := reachable(t, b.netns, a.netns, ipa); err != nil {
				t.Fatalf("pod b cannot reach pod a at %s: %v", ipa, err)
			}
			if got := masqEntries(t); !slices.Contains(got, ipa) || !slices.Contains(got, ipb) {
				t.Errorf("masquerade entries %v, want %s and %s", got, ipa, ipb)
			}
			if v != "0.3.0" && v != "0.3.1" {
				if err := e.cni.CheckNetworkList(context.Background(), l, a.rt); err != nil {
					t.Errorf("CHECK: %v", err)
				}
			}
			if v == "1.1.0" {
				if err := e.cni.GetStatusNetworkList(context.Background(), l); err != nil {
					t.Errorf("STATUS: %v", err)
				}
			}
			for _, p := range []*pod{a, b} {
				e.del(l, p)
				e.del(l, p)
			}
			if got := ourVeths(t); len(got) != 0 {
				t.Errorf("veths left after DEL: %v", got)
			}
			if got := e.reservations(l.Name); len(got) != 0 {
				t.Errorf("reservations left after DEL: %v", got)
			}
			if got := masqEntries(t); len(got) != 0 {
				t.Errorf("masquerade entries left after DEL: %v", got)
			}
			if got := cacheFiles(t, e.cacheDir); len(got) != 0 {
				t.Errorf("libcni cache files left after DEL: %v", got)
			}
		})
	}
}

// TestDualStack: IPv4 and IPv6 from one ADD, both reachable.
func TestDualStack(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "20-dualstack.conflist"))
	a, b := e.newPod("a"), e.newPod("b")
	ra, rb := e.add(l, a), e.add(l, b)
	for _, v4 := range []bool{true, false} {
		ipb := podIP(t, rb, v4)
		if err := reachable(t, a.netns, b.netns, ipb); err != nil {
			t.Errorf("pod a cannot reach pod b at %s: %v", ipb, err)
		}
	}
	if ip6 := podIP(t, ra, false); !netip.MustParsePrefix("fd00:88:8::/64").Contains(ip6) {
		t.Errorf("IPv6 address %s not in fd00:88:8::/64", ip6)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, a.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	e.del(l, a)
	e.del(l, b)
	e.del(l, b)
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left: %v", got)
	}
}

// TestSeedHostLocal runs the seed conflist from the systems we replace
// unchanged (the test runs in its own network namespace, so cni0 and
// 10.234.58.0/24 are private).
func TestSeedHostLocal(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, filepath.Join("testdata", "host-local-10-234-58.conflist"))
	a, b := e.newPod("a"), e.newPod("b")
	e.add(l, a)
	rb := e.add(l, b)
	ipb := podIP(t, rb, true)
	if !netip.MustParsePrefix("10.234.58.0/24").Contains(ipb) {
		t.Fatalf("address %s not in the seed's subnet", ipb)
	}
	if err := reachable(t, a.netns, b.netns, ipb); err != nil {
		t.Fatalf("pod a cannot reach pod b: %v", err)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, b.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	e.del(l, a)
	e.del(l, b)
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
}

// TestGCRemovesUnlistedAttachments: an attachment the runtime no longer lists
// (and that libcni has no cache for) is removed by the plugins' own GC.
func TestGCRemovesUnlistedAttachments(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "10-bridge.conflist"))
	keep, drop := e.newPod("keep"), e.newPod("drop")
	rk := e.add(l, keep)
	rd := e.add(l, drop)
	// Forget libcni's cache so that only the plugins' GC can clean up.
	os.RemoveAll(e.cacheDir)
	os.MkdirAll(e.cacheDir, 0o700)
	err := e.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: keep.id, IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	res := e.reservations(l.Name)
	if len(res) != 1 || res[0].Addr != podIP(t, rk, true) {
		t.Errorf("reservations after GC = %v, want only %s", res, podIP(t, rk, true))
	}
	if got := masqEntries(t); slices.Contains(got, podIP(t, rd, true)) || !slices.Contains(got, podIP(t, rk, true)) {
		t.Errorf("masquerade entries after GC = %v", got)
	}
	if got := ourVeths(t); len(got) != 1 {
		t.Errorf("veths after GC = %v, want one", got)
	}
	e.del(l, keep)
}

// TestAddRollback: when IPAM fails nothing is created; when a later step
// fails, the veth, the reservation and the record are undone.
func TestAddRollback(t *testing.T) {
	e := newEnv(t)
	tiny := listFromJSON(t, `{"cniVersion":"1.0.0","name":"tiny","plugins":[{"type":"bridge","bridge":"cbxtiny","isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/30"}]]}}]}`)
	first := e.newPod("first")
	e.add(tiny, first)
	second := e.newPod("second")
	_, err := e.cni.AddNetworkList(context.Background(), tiny, second.rt)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 100 {
		t.Fatalf("ADD on a full /30: err = %v, want CNI error code 100", err)
	}
	if !strings.Contains(te.Msg, "tiny") {
		t.Errorf("exhaustion message %q does not name the network", te.Msg)
	}
	if got := ourVeths(t); len(got) != 1 {
		t.Errorf("veths after failed ADD = %v, want only the first pod's", got)
	}
	e.del(tiny, first)

	// A bridge that already carries another address of the subnet makes the
	// gateway step fail after the veth and the reservation exist.
	conflict := listFromJSON(t, `{"cniVersion":"1.0.0","name":"conflict","plugins":[{"type":"bridge","bridge":"cbxconf","isGateway":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.78.0.0/24","gateway":"10.78.0.1"}]]}}]}`)
	h := hostHandle(t)
	if _, err := h.EnsureBridge(bridgeOpts("cbxconf")); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureAddr("cbxconf", netip.MustParsePrefix("10.78.0.200/24"), addrOpts()); err != nil {
		t.Fatal(err)
	}
	p := e.newPod("p")
	_, err = e.cni.AddNetworkList(context.Background(), conflict, p.rt)
	if !errors.As(err, &te) || te.Code != 7 || !strings.Contains(te.Msg, "forceAddress") {
		t.Fatalf("ADD with a conflicting bridge address: err = %v, want code 7 naming forceAddress", err)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after rollback: %v", got)
	}
	if got := e.reservations("conflict"); len(got) != 0 {
		t.Errorf("reservations left after rollback: %v", got)
	}
	if links := podLinks(t, p.netns); slices.Contains(links, "eth0") {
		t.Errorf("eth0 left in the pod after rollback: %v", links)
	}
	e.del(conflict, p) // DEL after a failed ADD succeeds
}
