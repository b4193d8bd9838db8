package netops_test

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
)

var (
	pmAddr = netip.MustParseAddr
)

// pmPod is the port maps of one pod with an IPv4 and an IPv6 address.
func pmPod(owner string, n int) netops.PortMaps {
	v4 := pmAddr(fmt.Sprintf("10.1.%d.%d", n/250, n%250+2))
	v6 := pmAddr(fmt.Sprintf("fd01::%x", n+2))
	port := uint16(10000 + n)
	return netops.PortMaps{
		Owner: owner,
		Mappings: []netops.PortMapping{
			{Proto: netops.ProtoTCP, HostPort: port, PodIP: v4, PodPort: 80},
			{Proto: netops.ProtoUDP, HostPort: port, PodIP: v4, PodPort: 53},
			{Proto: netops.ProtoSCTP, HostIP: pmAddr("192.0.2.1"), HostPort: port, PodIP: v4, PodPort: 9},
			{Proto: netops.ProtoTCP, HostPort: port, PodIP: v6, PodPort: 80},
			{Proto: netops.ProtoTCP, HostIP: pmAddr("2001:db8::1"), HostPort: port, PodIP: v6, PodPort: 443},
		},
		Masq: []netops.PortMasq{
			{PodIP: v4},
			{PodIP: v6, All: true},
		},
	}
}

func sortPM(ps []netops.PortMaps) []netops.PortMaps {
	ps = slices.Clone(ps)
	for i := range ps {
		ps[i].Mappings = slices.Clone(ps[i].Mappings)
		slices.SortFunc(ps[i].Mappings, func(a, b netops.PortMapping) int { return cmp.Compare(a.String(), b.String()) })
		ps[i].Masq = slices.Clone(ps[i].Masq)
		slices.SortFunc(ps[i].Masq, func(a, b netops.PortMasq) int { return a.PodIP.Compare(b.PodIP) })
	}
	slices.SortFunc(ps, func(a, b netops.PortMaps) int { return cmp.Compare(a.Owner, b.Owner) })
	return ps
}

func checkPM(t *testing.T, h *netops.Handle, want ...netops.PortMaps) {
	t.Helper()
	got, err := h.PortMapEntries()
	must(t, err)
	g, w := sortPM(got), sortPM(want)
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("PortMapEntries() =\n  %+v\nwant\n  %+v", g, w)
	}
}

func TestPortMaps(t *testing.T) {
	h := openNS(t, "pm")
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
		q := netops.PortMaps{
			Mappings: []netops.PortMapping{
				{Proto: netops.ProtoTCP, HostPort: 10000, PodIP: netip.IPv4Unspecified()},
				{Proto: netops.ProtoTCP, HostPort: 10001, PodIP: netip.IPv4Unspecified()}, // none
				{Proto: netops.ProtoTCP, HostIP: pmAddr("2001:db8::1"), HostPort: 10000, PodIP: netip.IPv6Unspecified()},
			},
			Masq: []netops.PortMasq{{PodIP: pmAddr("10.1.0.2")}, {PodIP: pmAddr("10.1.0.99")}},
		}
		got, err := h.LookupPortMaps(q)
		must(t, err)
		want := netops.PortMaps{Owner: a.Owner,
			Mappings: []netops.PortMapping{a.Mappings[0], a.Mappings[4]}, Masq: a.Masq[:1]}
		if fmt.Sprint(sortPM(got)) != fmt.Sprint(sortPM([]netops.PortMaps{want})) {
			t.Errorf("LookupPortMaps() = %+v, want %+v", got, want)
		}
	})

	// Another pod takes the host port 10000/tcp over IPv4: the newest wins.
	b := netops.PortMaps{Owner: "net1 ctr-b eth0", Mappings: []netops.PortMapping{
		{Proto: netops.ProtoTCP, HostPort: 10000, PodIP: pmAddr("10.1.0.77"), PodPort: 8080},
	}}
	t.Run("take over", func(t *testing.T) {
		replaced, err := h.EnsurePortMaps(b)
		must(t, err)
		wantRepl := []netops.PortMaps{{Owner: a.Owner, Mappings: a.Mappings[:1]}}
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
		bad := []netops.PortMaps{
			{Mappings: []netops.PortMapping{{Proto: netops.ProtoTCP, HostPort: 0, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []netops.PortMapping{{Proto: 1, HostPort: 80, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []netops.PortMapping{{Proto: netops.ProtoTCP, HostIP: pmAddr("fd00::1"), HostPort: 80, PodIP: pmAddr("10.1.0.2"), PodPort: 80}}},
			{Mappings: []netops.PortMapping{a.Mappings[0], a.Mappings[0]}},
			{Masq: []netops.PortMasq{{PodIP: pmAddr("10.1.0.2")}, {PodIP: pmAddr("10.1.0.2")}}},
			{Masq: []netops.PortMasq{{}}},
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
	path := nstest.NewNS(t, "pmflat")
	h, err := netops.Open(path)
	must(t, err)
	defer h.Close()
	var (
		pods            []netops.PortMaps
		chains1, rules1 int
	)
	for i := range 40 {
		p := pmPod(fmt.Sprintf("net1 ctr-%d eth0", i), i)
		if _, err := h.EnsurePortMaps(p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
		if i == 0 {
			chains1, rules1 = pmChainsRules(t, path)
		}
	}
	if chains, rules := pmChainsRules(t, path); chains != chains1 || rules != rules1 {
		t.Errorf("40 pods: %d chains, %d rules; one pod: %d, %d", chains, rules, chains1, rules1)
	}
	checkPM(t, h, pods...)
	must(t, h.DeletePortMaps(pods...))
	checkPM(t, h)
}

// pmChainsRules counts the chains and rules of the portmap table with raw
// dumps (the nftables package cannot parse the table's ct expressions).
func pmChainsRules(t *testing.T, nsPath string) (chains, rules int) {
	t.Helper()
	f, err := openNSFile(nsPath)
	must(t, err)
	defer f.Close()
	c, err := mdnetlink.Dial(unix.NETLINK_NETFILTER, &mdnetlink.Config{NetNS: int(f.Fd())})
	must(t, err)
	defer c.Close()
	count := func(msgType int, tableAttr uint16) int {
		data, _ := mdnetlink.MarshalAttributes([]mdnetlink.Attribute{{Type: tableAttr, Data: []byte(netops.PortMapTable + "\x00")}})
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
	path := nstest.NewNS(t, "pmconc")
	const n = 8
	errs := make(chan error, n)
	var pods []netops.PortMaps
	for i := range n {
		pods = append(pods, pmPod(fmt.Sprintf("net1 ctr-%d eth0", i), i))
	}
	for i := range n {
		go func() {
			h, err := netops.Open(path)
			if err != nil {
				errs <- err
				return
			}
			defer h.Close()
			_, err = h.EnsurePortMaps(pods[i])
			errs <- err
		}()
	}
	for range n {
		must(t, <-errs)
	}
	h, err := netops.Open(path)
	must(t, err)
	defer h.Close()
	checkPM(t, h, pods...)
	chains, rules := pmChainsRules(t, path)
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
				if _, err := h.EnsurePortMaps(pmPod(fmt.Sprintf("net1 other-%d eth0", i), i+1)); err != nil {
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
				if _, err := h.EnsurePortMaps(p); err != nil {
					b.Fatal(err)
				}
				if err := h.DeletePortMaps(p); err != nil {
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
