package nft_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// nftIn opens an nftables connection in h's namespace.
func nftIn(t *testing.T, h *netops.Handle) *nftables.Conn {
	t.Helper()
	ns, err := openNSFile(h.Path())
	must(t, err)
	t.Cleanup(func() { ns.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	must(t, err)
	return c
}

// TestOverlayForward: the cluster networks' accepts go into FLANNEL-FWD of
// iptables-nft's filter table when it has a FORWARD chain, else into
// cnibox's own table; a second call changes nothing; rules that differ or
// are gone are rewritten; prefixes off a byte boundary are matched right.
func TestOverlayForward(t *testing.T) {
	t.Parallel()
	nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10::/56")}
	check := func(t *testing.T, h *netops.Handle, want []string) {
		t.Helper()
		got, err := h.NFT().OverlayForward()
		must(t, err)
		if !slices.Equal(got, want) {
			t.Errorf("OverlayForward = %q\nwant %q", got, want)
		}
	}
	ensure := func(t *testing.T, h *netops.Handle, nets []netip.Prefix, wantChanged bool) {
		t.Helper()
		changed, err := h.NFT().EnsureOverlayForward(nets)
		must(t, err)
		if changed != wantChanged {
			t.Errorf("EnsureOverlayForward(%v) changed = %t, want %t", nets, changed, wantChanged)
		}
	}

	t.Run("own table", func(t *testing.T) {
		h := openNS(t, "ofw")
		ensure(t, h, nets, true)
		ensure(t, h, nets, false)
		own := nft.OverlayForwardTable
		check(t, h, []string{
			own + ` -s 10.244.0.0/16 ACCEPT "flanneld forward"`, own + ` -d 10.244.0.0/16 ACCEPT "flanneld forward"`,
			own + ` -s fd00:10::/56 ACCEPT "flanneld forward"`, own + ` -d fd00:10::/56 ACCEPT "flanneld forward"`,
		})
		// Another network (off a byte boundary) replaces the rules.
		ensure(t, h, []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}, true)
		ensure(t, h, []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}, false)
		check(t, h, []string{
			own + ` -s 10.128.0.0/9 ACCEPT "flanneld forward"`, own + ` -d 10.128.0.0/9 ACCEPT "flanneld forward"`,
			own + ` -s fd00:10::/56 ACCEPT "flanneld forward"`, own + ` -d fd00:10::/56 ACCEPT "flanneld forward"`,
		})
	})

	t.Run("iptables-nft filter FORWARD", func(t *testing.T) {
		h := openNS(t, "ofwi")
		c := nftIn(t, h)
		drop := nftables.ChainPolicyDrop
		for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
			tb := c.AddTable(&nftables.Table{Family: fam, Name: "filter"})
			c.AddChain(&nftables.Chain{Name: "FORWARD", Table: tb, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
		}
		must(t, c.Flush())
		ensure(t, h, nets, true)
		ensure(t, h, nets, false)
		check(t, h, []string{
			`filter -s 10.244.0.0/16 ACCEPT "flanneld forward"`, `filter -d 10.244.0.0/16 ACCEPT "flanneld forward"`,
			`filter -s fd00:10::/56 ACCEPT "flanneld forward"`, `filter -d fd00:10::/56 ACCEPT "flanneld forward"`,
		})
		// The jump is appended once to FORWARD.
		tb := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}
		rules, err := c.GetRules(tb, &nftables.Chain{Name: "FORWARD", Table: tb})
		must(t, err)
		if len(rules) != 1 {
			t.Fatalf("FORWARD has %d rules, want the one jump", len(rules))
		}
		// Someone flushes FLANNEL-FWD and the jump: both come back.
		c.FlushChain(&nftables.Chain{Name: nft.OverlayForwardChain, Table: tb})
		c.FlushChain(&nftables.Chain{Name: "FORWARD", Table: tb})
		must(t, c.Flush())
		ensure(t, h, nets, true)
		check(t, h, []string{
			`filter -s 10.244.0.0/16 ACCEPT "flanneld forward"`, `filter -d 10.244.0.0/16 ACCEPT "flanneld forward"`,
			`filter -s fd00:10::/56 ACCEPT "flanneld forward"`, `filter -d fd00:10::/56 ACCEPT "flanneld forward"`,
		})
		if rules, err = c.GetRules(tb, &nftables.Chain{Name: "FORWARD", Table: tb}); err != nil || len(rules) != 1 {
			t.Fatalf("FORWARD after the restore: %d rules, %v", len(rules), err)
		}
	})
}

// TestOverlayMasqFullyRandom: fully-random masquerade by default, plain
// with NotFullyRandom; a changed setting rewrites the table, the same
// one does not.
func TestOverlayMasqFullyRandom(t *testing.T) {
	t.Parallel()
	h := openNS(t, "omr")
	nets := []nft.OverlayMasqNet{{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.1.0/24")}}
	c := nftIn(t, h)
	fully := func() []bool {
		tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: nft.OverlayMasqTable}
		rules, err := c.GetRules(tb, &nftables.Chain{Name: "postrouting", Table: tb})
		must(t, err)
		var out []bool
		for _, r := range rules {
			for _, e := range r.Exprs {
				if m, ok := e.(*expr.Masq); ok {
					out = append(out, m.FullyRandom)
				}
			}
		}
		return out
	}
	for i, step := range []struct {
		o       nft.OverlayMasqOpts
		changed bool
		fully   []bool
	}{
		{nft.OverlayMasqOpts{}, true, []bool{true, true}},
		{nft.OverlayMasqOpts{}, false, []bool{true, true}},
		{nft.OverlayMasqOpts{NotFullyRandom: true}, true, []bool{false, false}},
		{nft.OverlayMasqOpts{NotFullyRandom: true}, false, []bool{false, false}},
	} {
		changed, err := h.NFT().EnsureOverlayMasq(nets, step.o)
		must(t, err)
		if changed != step.changed || !slices.Equal(fully(), step.fully) {
			t.Errorf("step %d (%+v): changed %t, fully-random %v; want %t, %v", i, step.o, changed, fully(), step.changed, step.fully)
		}
	}
	// Flushed by hand: the next call restores it.
	must(t, h.NFT().DeleteOverlayMasq())
	if changed, err := h.NFT().EnsureOverlayMasq(nets, nft.OverlayMasqOpts{}); err != nil || !changed {
		t.Fatalf("after a delete: changed %t, %v", changed, err)
	}
}

// TestBlackholeRoute: the blackhole route of a node's subnet sits beside
// the bridge's connected route to the same subnet (which keeps winning),
// idempotently, and goes.
func TestBlackholeRoute(t *testing.T) {
	t.Parallel()
	h := openNS(t, "obh")
	peer := openNS(t, "obhp")
	_, _, err := h.EnsureVeth(netops.VethOpts{HostName: "cni0", PeerName: "eth0", Peer: peer})
	must(t, err)
	must(t, h.EnsureAddr("cni0", netip.MustParsePrefix("10.244.1.1/24"), netops.AddrOpts{NoDAD: true}))
	must(t, h.EnsureAddr("cni0", netip.MustParsePrefix("fd00:10:0:1::1/64"), netops.AddrOpts{NoDAD: true}))
	for _, sn := range []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:0:1::/64")} {
		for i, want := range []bool{true, false} {
			added, err := h.EnsureBlackholeRoute(sn)
			if err != nil || added != want {
				t.Fatalf("%s: EnsureBlackholeRoute #%d = %t, %v; want %t", sn, i, added, err, want)
			}
		}
		if ok, err := h.HasBlackholeRoute(sn); err != nil || !ok {
			t.Fatalf("%s: HasBlackholeRoute = %t, %v", sn, ok, err)
		}
		// The connected route still carries the traffic.
		dev, _, err := h.RouteGet(sn.Addr().Next().Next())
		if err != nil || dev != "cni0" {
			t.Errorf("%s: route get = %s, %v; want cni0 (the bridge's route wins over the blackhole)", sn, dev, err)
		}
		for range 2 {
			must(t, h.DeleteBlackholeRoute(sn))
		}
		if ok, err := h.HasBlackholeRoute(sn); err != nil || ok {
			t.Fatalf("%s: HasBlackholeRoute after delete = %t, %v", sn, ok, err)
		}
	}
}

// BenchmarkNodeRulesCheck is one --iptables-resync check that finds the
// forward rules (in iptables-nft's filter table), the masquerade and the
// blackhole route in place: what the agent does every 5 s by default.
func BenchmarkNodeRulesCheck(b *testing.B) {
	h, err := netops.Open(nstest.NewNS(b, "obench"))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ns, err := openNSFile(h.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		b.Fatal(err)
	}
	drop := nftables.ChainPolicyDrop
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		tb := c.AddTable(&nftables.Table{Family: fam, Name: "filter"})
		c.AddChain(&nftables.Chain{Name: "FORWARD", Table: tb, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	nets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	masq := []nft.OverlayMasqNet{{Network: nets[0], Subnet: netip.MustParsePrefix("10.244.1.0/24")}}
	sn := masq[0].Subnet
	check := func() {
		if _, err := h.NFT().EnsureOverlayForward(nets); err != nil {
			b.Fatal(err)
		}
		if _, err := h.NFT().EnsureOverlayMasq(masq, nft.OverlayMasqOpts{}); err != nil {
			b.Fatal(err)
		}
		if _, err := h.EnsureBlackholeRoute(sn); err != nil {
			b.Fatal(err)
		}
	}
	check()
	b.ResetTimer()
	for range b.N {
		check()
	}
}
