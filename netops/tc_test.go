package netops_test

import (
	"errors"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// TestTC sets up what the bandwidth role does on a veth pair in a test
// namespace: a tbf on one end, an ifb with a tbf, and the ingress redirect
// to it; then reads it back and removes it, twice.
func TestTC(t *testing.T) {
	h := openNS(t, "tc")
	pod := openNS(t, "tcpod")
	if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: "hv0", PeerName: "eth0", Peer: pod}); err != nil {
		t.Fatal(err)
	}

	// Nothing there yet.
	if _, found, err := h.RootTBF("hv0"); err != nil || found {
		t.Fatalf("RootTBF before = found %v, %v; want none", found, err)
	}
	if _, found, err := h.IngressRedirect("hv0"); err != nil || found {
		t.Fatalf("IngressRedirect before = found %v, %v; want none", found, err)
	}
	if _, _, err := h.RootTBF("nosuch"); !errors.Is(err, netops.ErrNotFound) {
		t.Fatalf("RootTBF(nosuch) = %v, want ErrNotFound", err)
	}

	in := netops.NewTBF(1_000_000/8, 100_000/8)
	for range 2 { // idempotent
		must(t, h.EnsureRootTBF("hv0", in))
	}
	got, found, err := h.RootTBF("hv0")
	if err != nil || !found || got != in {
		t.Fatalf("RootTBF = %+v, %v, %v; want %+v", got, found, err, in)
	}

	ifb, created, err := h.EnsureIfb("ifbt0", 1400)
	must(t, err)
	if ifb.Kind != "ifb" || !ifb.Up || ifb.MTU != 1400 || !created {
		t.Errorf("ifb = %+v, created %v; want kind ifb, up, mtu 1400, created", ifb, created)
	}
	if _, created, err := h.EnsureIfb("ifbt0", 1400); err != nil || created {
		t.Errorf("EnsureIfb again = created %v, %v; want the existing one", created, err)
	}
	if _, _, err := h.EnsureIfb("hv0", 0); !errors.Is(err, netops.ErrExists) {
		t.Errorf("EnsureIfb on a veth = %v, want ErrExists", err)
	}
	// A rate above 32 bits (40 Gbit/s) takes the 64-bit attribute.
	out := netops.NewTBF(5_000_000_000, 1_000_000)
	must(t, h.EnsureRootTBF("ifbt0", out))
	if got, _, _ := h.RootTBF("ifbt0"); got != out {
		t.Errorf("ifb tbf = %+v, want %+v", got, out)
	}
	for range 2 {
		must(t, h.EnsureIngressRedirect("hv0", "ifbt0"))
	}
	to, found, err := h.IngressRedirect("hv0")
	if err != nil || !found || to != ifb.Index {
		t.Fatalf("IngressRedirect = %d, %v, %v; want %d", to, found, err, ifb.Index)
	}

	for range 2 {
		must(t, h.DeleteIngressQdisc("hv0"))
		must(t, h.DeleteRootTBF("hv0"))
		must(t, h.DeleteLink("ifbt0"))
	}
	if _, found, _ := h.RootTBF("hv0"); found {
		t.Error("tbf still on hv0 after DeleteRootTBF")
	}
	if _, found, _ := h.IngressRedirect("hv0"); found {
		t.Error("redirect still on hv0 after DeleteIngressQdisc")
	}
	// Once deleted, the redirect can be set up again (the ingress queue keeps a noop qdisc).
	_, _, err = h.EnsureIfb("ifbt0", 0)
	must(t, err)
	must(t, h.EnsureIngressRedirect("hv0", "ifbt0"))
	must(t, h.DeleteLink("hv0"))
	must(t, h.DeleteRootTBF("hv0"))
	must(t, h.DeleteIngressQdisc("hv0"))
}

func TestNewTBFCaps(t *testing.T) {
	// The burst Kubernetes passes for "no burst limit" (MaxInt32 bits) at 1 Mbit/s
	// is longer than the kernel's bucket: capped, not wrapped around.
	tb := netops.NewTBF(1_000_000/8, (1<<31-1)/8)
	if tb.Buffer == 0 || tb.Buffer > 0xffffffff/64 {
		t.Errorf("buffer = %d ticks, want capped at %d", tb.Buffer, 0xffffffff/64)
	}
	if tb.Limit < (1<<31-1)/8 {
		t.Errorf("limit = %d, want at least the burst", tb.Limit)
	}
}

func TestLinkSettings(t *testing.T) {
	h := openNS(t, "tun")
	pod := openNS(t, "tunpod")
	if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: "hv0", PeerName: "eth0", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	s, err := pod.LinkSettings("eth0")
	must(t, err)
	if s.Allmulti || s.Promisc || s.TxQLen != 1000 || s.MTU != 1500 {
		t.Errorf("defaults = %+v", s)
	}
	must(t, pod.SetAllmulticast("eth0", true))
	must(t, pod.SetTxQLen("eth0", 42))
	must(t, pod.SetPromisc("eth0", true))
	s, err = pod.LinkSettings("eth0")
	must(t, err)
	if !s.Allmulti || !s.Promisc || s.TxQLen != 42 {
		t.Errorf("after set = %+v, want allmulti, promisc, txqlen 42", s)
	}
	must(t, pod.SetAllmulticast("eth0", false))
	if s, _ = pod.LinkSettings("eth0"); s.Allmulti {
		t.Error("allmulti still on")
	}
	if _, err := pod.LinkSettings("nosuch"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("LinkSettings(nosuch) = %v, want ErrNotFound", err)
	}

	vals, err := pod.Sysctls("net.ipv4.conf.eth0.arp_filter", "net/ipv4/conf/eth0/rp_filter")
	must(t, err)
	if len(vals) != 2 {
		t.Fatalf("Sysctls = %q", vals)
	}
	if _, err := pod.Sysctls("net.core.nosuch"); !errors.Is(err, netops.ErrNotFound) {
		t.Errorf("Sysctls(nosuch) = %v, want ErrNotFound", err)
	}
}
