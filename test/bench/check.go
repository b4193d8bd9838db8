package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// checkAddresses fails when a pod got no address, one outside its side's
// subnet, or one another pod of the batch also got.
func (b *bench) checkAddresses(what string, s *side, pods []*pod) {
	subnet := netip.PrefixFrom(s.subnet.Addr(), podSubnetBits(b.o.n))
	owner := map[netip.Addr]int{}
	var bad []string
	for _, p := range pods {
		if !p.added {
			continue
		}
		if len(p.ips) == 0 {
			bad = append(bad, fmt.Sprintf("pod %d: no address in the result", p.idx))
		}
		for _, a := range p.ips {
			if !subnet.Contains(a) {
				bad = append(bad, fmt.Sprintf("pod %d: address %s outside %s", p.idx, a, subnet))
			}
			if o, dup := owner[a]; dup {
				bad = append(bad, fmt.Sprintf("pods %d and %d both got %s", o, p.idx, a))
			}
			owner[a] = p.idx
		}
	}
	if len(bad) > 0 {
		b.fail("%s: addresses: %s", what, summarize(bad))
	}
}

// checkClean fails when anything of the batch is left after DEL: libcni
// cache files, veths, the pods' interfaces (pods nil: not checked),
// reservations, endpoint records, nftables/iptables state.
func (b *bench) checkClean(what string, s *side, c *cniCase, pods []*pod) {
	var left []string
	if l := podLinksLeft(pods); len(l) > 0 {
		left = append(left, fmt.Sprintf("the interface of %d pods (%s)", len(l), summarize(l)))
	}
	if files := filesUnder(s.cacheDir); len(files) > 0 {
		left = append(left, fmt.Sprintf("%d libcni cache files (%s)", len(files), summarize(files)))
	}
	if veths, err := nodeVeths(); err != nil {
		b.fail("%s: list links: %v", what, err)
	} else if len(veths) > 0 {
		left = append(left, fmt.Sprintf("%d veths (%s)", len(veths), summarize(veths)))
	}
	if s.ours {
		left = append(left, b.oursLeft(what, s)...)
	} else {
		if files := refReservations(s.dataDir, netName); len(files) > 0 {
			left = append(left, fmt.Sprintf("%d host-local reservation files (%s)", len(files), summarize(files)))
		}
	}
	snap, err := takeNFT()
	if err != nil {
		b.fail("%s: list nftables: %v", what, err)
	} else {
		left = append(left, snap.perPod()...)
		if b.baseline != nil {
			left = append(left, snap.grownFrom(b.baseline)...)
		}
	}
	if len(left) > 0 {
		b.fail("%s: left after DEL: %s", what, strings.Join(left, "; "))
	}
}

// checkVisible makes sure the leftover checks can see a pod's state at
// all (run once, in the warm-up, after ADD): its veth, its reservation, its
// masquerade rule (the reference's per-pod iptables chain, our map element).
func (b *bench) checkVisible(what string, s *side, c *cniCase, pods []*pod) {
	n := 0
	for _, p := range pods {
		if p.added {
			n++
		}
	}
	if n == 0 {
		return
	}
	var blind []string
	if c.linkKind() == "veth" {
		if veths, err := nodeVeths(); err != nil || len(veths) < n {
			blind = append(blind, fmt.Sprintf("veths (%d seen, %v)", len(veths), err))
		}
	}
	if left := podLinksLeft(pods); len(left) < n {
		blind = append(blind, fmt.Sprintf("the pods' interfaces (%d seen)", len(left)))
	}
	if s.ours {
		if left := b.oursLeft(what, s); len(left) == 0 {
			blind = append(blind, "our store and nftables elements")
		}
	} else {
		if files := refReservations(s.dataDir, netName); len(files) < n {
			blind = append(blind, fmt.Sprintf("host-local files (%d seen)", len(files)))
		}
		if snap, err := takeNFT(); c.masq() && (err != nil || len(snap.perPod()) == 0) {
			blind = append(blind, fmt.Sprintf("per-pod iptables chains (%v)", err))
		}
	}
	if len(blind) > 0 {
		b.fail("%s: after ADD the leftover checks cannot see: %s", what, strings.Join(blind, "; "))
	}
}

// oursLeft lists what cnibox kept of the network: reservations and endpoint
// records in its store, masquerade and port map elements.
func (b *bench) oursLeft(what string, s *side) []string {
	var left []string
	st, err := store.OpenWith(s.dataDir, store.Options{NoCreate: true})
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		b.fail("%s: open our store: %v", what, err)
	default:
		var res []store.Reservation
		err := st.ViewIPAM(netName, func(tx *store.IPAMTx) error { res = tx.All(); return nil })
		if err != nil {
			b.fail("%s: read our reservations: %v", what, err)
		}
		for _, r := range res {
			left = append(left, fmt.Sprintf("reservation %s (%s)", r.Addr, r.ContainerID[:min(12, len(r.ContainerID))]))
		}
		eps, err := st.Endpoints(netName)
		if err != nil {
			b.fail("%s: read our endpoint records: %v", what, err)
		}
		if len(eps) > 0 {
			left = append(left, fmt.Sprintf("%d endpoint records", len(eps)))
		}
		st.Close()
	}
	h, err := netops.Open("")
	if err != nil {
		b.fail("%s: %v", what, err)
		return left
	}
	defer h.Close()
	if ms, err := h.NFT().MasqEntries(); err != nil {
		b.fail("%s: read masquerade entries: %v", what, err)
	} else if len(ms) > 0 {
		left = append(left, fmt.Sprintf("%d masquerade map elements", len(ms)))
	}
	if pm, err := h.NFT().PortMapEntries(); err != nil {
		b.fail("%s: read port map entries: %v", what, err)
	} else if len(pm) > 0 {
		left = append(left, fmt.Sprintf("%d port map owners", len(pm)))
	}
	return left
}

// refReservations lists the reference host-local's reservation files of a
// network (everything but its lock and last_reserved_ip.* files).
func refReservations(dataDir, network string) []string {
	ents, err := os.ReadDir(filepath.Join(dataDir, network))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if n == "lock" || strings.HasPrefix(n, "last_reserved_ip.") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// podLinksLeft lists the pods (of those whose namespace is there) that
// have their CNI_IFNAME interface.
func podLinksLeft(pods []*pod) []string {
	var out []string
	for _, p := range pods {
		h, err := netops.Open(p.nsPath)
		if err != nil {
			continue
		}
		if l, err := h.LinkByName(p.rt.IfName); err == nil {
			out = append(out, fmt.Sprintf("pod %d %s (%s)", p.idx, l.Name, l.Kind))
		}
		h.Close()
	}
	return out
}

// nodeVeths lists the veths in the node namespace (but the macvlan
// master, which stays).
func nodeVeths() ([]string, error) {
	h, err := netops.Open("")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ls, err := h.Links()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		if l.Kind == "veth" && l.Name != lowerName {
			out = append(out, l.Name)
		}
	}
	return out, nil
}

func filesUnder(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func summarize(list []string) string {
	if len(list) > 4 {
		return strings.Join(list[:4], ", ") + fmt.Sprintf(", ... (%d in all)", len(list))
	}
	return strings.Join(list, ", ")
}

// nftSnapshot counts, per nftables chain and set of the node namespace
// (iptables-nft keeps the reference's iptables rules there too), the rules
// or elements: "chain <family> <table> <name>" -> rules,
// "set <family> <table> <name>" -> elements.
type nftSnapshot map[string]int

func takeNFT() (nftSnapshot, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	snap := nftSnapshot{}
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	tables := map[string]*nftables.Table{}
	for _, ch := range chains {
		snap[fmt.Sprintf("chain %s %s %s", nft.FamilyName(ch.Table.Family), ch.Table.Name, ch.Name)] = 0
		tables[nft.FamilyName(ch.Table.Family)+" "+ch.Table.Name] = ch.Table
	}
	// Rules are counted from a raw dump: nftables' expression decoder does not
	// know every expression the plugins use.
	counts, err := countRules()
	if err != nil {
		return nil, err
	}
	for k, n := range counts {
		snap[k] = n
	}
	for _, t := range tables {
		sets, err := c.GetSets(t)
		if err != nil {
			return nil, fmt.Errorf("list sets of %s %s: %w", nft.FamilyName(t.Family), t.Name, err)
		}
		for _, s := range sets {
			if s.Anonymous {
				continue
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				return nil, fmt.Errorf("list elements of %s %s %s: %w", nft.FamilyName(t.Family), t.Name, s.Name, err)
			}
			snap[fmt.Sprintf("set %s %s %s", nft.FamilyName(t.Family), t.Name, s.Name)] = len(els)
		}
	}
	return snap, nil
}

// countRules dumps every nftables rule of the namespace and counts them per
// "chain <family> <table> <chain>", reading only the table and chain names.
func countRules() (map[string]int, error) {
	conn, err := mdnetlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("dial nfnetlink: %w", err)
	}
	defer conn.Close()
	msgs, err := conn.Execute(mdnetlink.Message{
		Header: mdnetlink.Header{
			Type:  mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: mdnetlink.Request | mdnetlink.Dump,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return nil, fmt.Errorf("dump nftables rules: %w", err)
	}
	out := map[string]int{}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := mdnetlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("decode nftables rule: %w", err)
		}
		var table, chain string
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_TABLE:
				table = ad.String()
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			}
		}
		out[fmt.Sprintf("chain %s %s %s", nft.FamilyName(nftables.TableFamily(m.Data[0])), table, chain)]++
	}
	return out, nil
}

// perPod lists the reference's per-pod iptables state: chains CNI-<hash>
// (bridge masquerade) and CNI-DN-<hash> (portmap), rules in the hostport
// DNAT chain.
func (s nftSnapshot) perPod() []string {
	var out []string
	for _, k := range s.keys() {
		f := strings.Fields(k)
		if len(f) != 4 || f[0] != "chain" {
			continue
		}
		name := f[3]
		switch {
		case strings.HasPrefix(name, "CNI-HOSTPORT-"):
			if name == "CNI-HOSTPORT-DNAT" && s[k] > 0 {
				out = append(out, fmt.Sprintf("%d rules in %s", s[k], strings.Join(f[1:], " ")))
			}
		case name == "CNI-FORWARD" || name == "CNI-ADMIN" || name == "CNI-ISOLATION":
			// The firewall's chains stay after DEL (both sides'); their
			// rules are compared with the warm-up's (grownFrom).
		case strings.HasPrefix(name, "CNI-"):
			out = append(out, "per-pod chain "+strings.Join(f[1:], " "))
		}
	}
	return out
}

// grownFrom lists chains and sets that are new since base or hold more
// rules or elements than then.
func (s nftSnapshot) grownFrom(base nftSnapshot) []string {
	var out []string
	for _, k := range s.keys() {
		was, ok := base[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("new %s (%d entries)", k, s[k]))
		case s[k] > was:
			out = append(out, fmt.Sprintf("%s: %d entries, %d after the warm-up", k, s[k], was))
		}
	}
	return out
}

func (s nftSnapshot) keys() []string {
	ks := make([]string, 0, len(s))
	for k := range s {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
