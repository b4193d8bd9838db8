package nft_test

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

var (
	pmAddr = netip.MustParseAddr
)

// pmPod is the port maps of one pod with an IPv4 and an IPv6 address.
func pmPod(owner string, n int) nft.PortMaps {
	v4 := pmAddr(fmt.Sprintf("10.1.%d.%d", n/250, n%250+2))
	v6 := pmAddr(fmt.Sprintf("fd01::%x", n+2))
	port := uint16(10000 + n)
	return nft.PortMaps{
		Owner: owner,
		Mappings: []nft.PortMapping{
			{Proto: nft.ProtoTCP, HostPort: port, PodIP: v4, PodPort: 80},
			{Proto: nft.ProtoUDP, HostPort: port, PodIP: v4, PodPort: 53},
			{Proto: nft.ProtoSCTP, HostIP: pmAddr("192.0.2.1"), HostPort: port, PodIP: v4, PodPort: 9},
			{Proto: nft.ProtoTCP, HostPort: port, PodIP: v6, PodPort: 80},
			{Proto: nft.ProtoTCP, HostIP: pmAddr("2001:db8::1"), HostPort: port, PodIP: v6, PodPort: 443},
		},
		Masq: []nft.PortMasq{
			{PodIP: v4},
			{PodIP: v6, All: true},
		},
	}
}

func sortPM(ps []nft.PortMaps) []nft.PortMaps {
	ps = slices.Clone(ps)
	for i := range ps {
		ps[i].Mappings = slices.Clone(ps[i].Mappings)
		slices.SortFunc(ps[i].Mappings, func(a, b nft.PortMapping) int { return cmp.Compare(a.String(), b.String()) })
		ps[i].Masq = slices.Clone(ps[i].Masq)
		slices.SortFunc(ps[i].Masq, func(a, b nft.PortMasq) int { return a.PodIP.Compare(b.PodIP) })
	}
	slices.SortFunc(ps, func(a, b nft.PortMaps) int { return cmp.Compare(a.Owner, b.Owner) })
	return ps
}

func checkPM(t *testing.T, h *nft.Handle, want ...nft.PortMaps) {
	t.Helper()
	got, err := h.PortMapEntries()
	must(t, err)
	g, w := sortPM(got), sortPM(want)
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("PortMapEntries() =\n  %+v\nwant\n  %+v", g, w)
	}
}

func TestPortMaps(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "pm", testPortMaps)
}

func testPortMaps(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	a := pmPod("net1 ctr-a eth0", 0)

	// Deleting and listing before anything exists is fine.
	must(t, h.DeletePortMaps(a))
	checkPM(t, h)
	if got, err := h.LookupPortMaps(a); err != nil || len(got) != 0 {
		t.Fatalf("LookupPortMaps() on an empty namespace = %v, %v", got, err)
	}

	replaced, err := h.EnsurePortMaps(a)
	must(t, err)
	if len(replaced) != 0 {
		t.Errorf("first EnsurePortMaps replaced %v", replaced)
	}
	checkPM(t, h, a)

	t.Run("again", func(t *testing.T) {
		replaced, err := h.EnsurePortMaps(a)
		must(t, err)
		if len(replaced) != 0 {
			t.Errorf("repeated EnsurePortMaps replaced %v", replaced)
		}
		checkPM(t, h, a)
	})

	t.Run("lookup", func(t *testing.T) {
		q := nft.PortMaps{
			Mappings: []nft.PortMapping{
				{Proto: nft.ProtoTCP, HostPort: 10000, PodIP: netip.IPv4Unspecified()},
				{Proto: nft.ProtoTCP, HostPort: 10001, PodIP: netip.IPv4Unspecified()}, // none
				{Proto: nft.ProtoTCP, HostIP: pmAddr("2001:db8::1"), HostPort: 10000, PodIP: netip.IPv6Unspecified()},
			},
			Masq: []nft.PortMasq{{PodIP: pmAddr("10.1.0.2")}, {PodIP: pmAddr("10.1.0.99")}},
		}
		got, err := h.LookupPortMaps(q)
		must(t, err)
		want := nft.PortMaps{Owner: a.Owner,
			Mappings: []nft.PortMapping{a.Mappings[0], a.Mappings[4]}, Masq: a.Masq[:1]}
		if fmt.Sprint(sortPM(got)) != fmt.Sprint(sortPM([]nft.PortMaps{want})) {
			t.Errorf("LookupPortMaps() = %+v, want %+v", got, want)
		}
	})

	// Another pod takes the host port 10000/tcp over IPv4: the newest wins.
	b := nft.PortMaps{Owner: "net1 ctr-b eth0", Mappings: []nft.PortMapping{
		{Proto: nft.ProtoTCP, HostPort: 10000, PodIP: pmAddr("10.1.0.77"), PodPort: 8080},
	}}
	t.Run("take over", func(t *testing.T) {
		replaced, err := h.EnsurePortMaps(b)
		must(t, err)
		wantRepl := []nft.PortMaps{{Owner: a.Owner, Mappings: a.Mappings[:1]}}
		if fmt.Sprint(replaced) != fmt.Sprint(wantRepl) {
			t.Errorf("replaced = %+v, want %+v", replaced, wantRepl)
		}
		rest := a
		rest.Mappings = a.Mappings[1:]
		checkPM(t, h, rest, b)
	})

	t.Run("delete", func(t *testing.T) {
		// a's delete leaves b's element of the same key alone.
		must(t, h.DeletePortMaps(a))
		must(t, h.DeletePortMaps(a))
		checkPM(t, h, b)
		must(t, h.DeletePortMaps(b))
		must(t, h.DeletePortMaps(b))
		checkPM(t, h)
	})

	t.Run("invalid", func(t *testing.T) {
		bad := []nft.PortMaps{
			{Mappings: []nft.PortMapping{{Proto: nft.ProtoTCP, HostPort: 0, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []nft.PortMapping{{Proto: 1, HostPort: 80, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []nft.PortMapping{{Proto: nft.ProtoTCP, HostIP: pmAddr("fd00::1"), HostPort: 80, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []nft.PortMapping{a.Mappings[0], a.Mappings[0]}},
			{Masq: []nft.PortMasq{{PodIP: pmAddr("10.1.0.2")}, {PodIP: pmAddr("10.1.0.2")}}},
			{Masq: []nft.PortMasq{{}}},
		}
		for _, p := range bad {
			if _, err := h.EnsurePortMaps(p); err == nil {
				t.Errorf("EnsurePortMaps(%+v) succeeded", p)
			}
		}
	})
}

// TestPortMapsFlat: the table's chains and rules do not grow with the number
// of pods; every pod is map elements only.
func TestPortMapsFlat(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "pmflat", testPortMapsFlat)
}

func testPortMapsFlat(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	var (
		pods            []nft.PortMaps
		chains1, rules1 int
	)
	for i := range 40 {
		p := pmPod(fmt.Sprintf("net1 ctr-%d eth0", i), i)
		if _, err := h.EnsurePortMaps(p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
		if i == 0 {
			chains1, rules1 = pmChainsRules(t, k)
		}
	}
	if chains, rules := pmChainsRules(t, k); chains != chains1 || rules != rules1 {
		t.Errorf("40 pods: %d chains, %d rules; one pod: %d, %d", chains, rules, chains1, rules1)
	}
	checkPM(t, h, pods...)
	must(t, h.DeletePortMaps(pods...))
	checkPM(t, h)
}

// pmChainsRules counts the chains and rules of the portmap table with raw
// dumps (the nftables package cannot parse the table's ct expressions).
func pmChainsRules(t *testing.T, k *labtest.NFT) (chains, rules int) {
	t.Helper()
	c := k.Raw()
	count := func(msgType int, tableAttr uint16) int {
		data, _ := mdnetlink.MarshalAttributes([]mdnetlink.Attribute{{Type: tableAttr, Data: []byte(nft.PortMapTable + "\x00")}})
		msgs, err := c.Execute(mdnetlink.Message{
			Header: mdnetlink.Header{Type: mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msgType), Flags: mdnetlink.Request | mdnetlink.Dump},
			Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, data...),
		})
		must(t, err)
		return len(msgs)
	}
	return count(unix.NFT_MSG_GETCHAIN, unix.NFTA_CHAIN_TABLE), count(unix.NFT_MSG_GETRULE, unix.NFTA_RULE_TABLE)
}

// TestPortMapsConcurrentFirst: the first pods of a node, added at once from
// several processes' worth of handles, all end up in one complete table.
func TestPortMapsConcurrentFirst(t *testing.T) {
	t.Parallel()
	labtest.OnNFT(t, "pmconc", testPortMapsConcurrentFirst)
}

func testPortMapsConcurrentFirst(t *testing.T, k *labtest.NFT) {
	const n = 8
	errs := make(chan error, n)
	var pods []nft.PortMaps
	var hs []*nft.Handle
	for i := range n {
		pods = append(pods, pmPod(fmt.Sprintf("net1 ctr-%d eth0", i), i))
		hs = append(hs, k.Open())
	}
	for i := range n {
		go func() {
			_, err := hs[i].EnsurePortMaps(pods[i])
			errs <- err
		}()
	}
	for range n {
		must(t, <-errs)
	}
	checkPM(t, k.Open(), pods...)
	chains, rules := pmChainsRules(t, k)
	// prerouting, output, postrouting, hostports, masq4, masq6 with
	// 1 + 1 + 4 + 4 + 3 + 2 rules.
	if chains != 6 || rules != 15 {
		t.Errorf("after concurrent first adds: %d chains, %d rules; want 6, 15", chains, rules)
	}
}

// BenchmarkPortMaps measures one pod's port maps (5 mappings, 2 masquerade
// entries) added and deleted with a fresh Handle, with 1 and 500 other pods
// in the table: the cost should not grow.
func BenchmarkPortMaps(b *testing.B) {
	for _, others := range []int{1, 500, 2000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			path := nstest.NewNS(b, "pmbench")
			h, err := netops.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			for i := range others {
				if _, err := h.NFT().EnsurePortMaps(pmPod(fmt.Sprintf("net1 other-%d eth0", i), i+1)); err != nil {
					b.Fatal(err)
				}
			}
			h.Close()
			p := pmPod("net1 bench eth0", 0)
			b.ResetTimer()
			for range b.N {
				h, err := netops.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := h.NFT().EnsurePortMaps(p); err != nil {
					b.Fatal(err)
				}
				if err := h.NFT().DeletePortMaps(p); err != nil {
					b.Fatal(err)
				}
				// Close waits for the kernel's cleanup of the deletion
				// (perf-notes): the same for every table size, untimed.
				b.StopTimer()
				h.Close()
				b.StartTimer()
			}
		})
	}
}
