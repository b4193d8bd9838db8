package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/test/internal/netload"
)

// The rule walk (-rule-walk DIR): what nftables evaluates for one
// connection through each pair, read from nftables' own trace in each
// node's namespace. A table of the bench's own (inet dpwalk) marks the
// connection's SYN and its data packets for tracing at prerouting; the
// kernel's trace events (netlink group NFNLGRP_NFTRACE: the table, chain
// and handle of each rule that matched, its verdict, each chain's end)
// and the rules' order in their chains (a dump of the rules' handles)
// count the rules evaluated as the kernel walks them: a chain left by a
// verdict counts its rules up to that one, a chain walked to its end (its
// policy, or back to the chain that jumped to it) counts them all. The
// counts per packet (the SYN: a new connection; a data packet of the
// client's, and of the server's reply: an established one), per node,
// with the chains entered, go to DIR/<seq>-<configuration>-walk.txt; the
// tracing table is removed before the measurements. Not product code: the
// table is added with nft, in the bench's node namespaces only (nft
// v1.0.6 cannot list cnibox's tables back, so nothing here lists rules
// with it).
const walkTable = "dpwalk"

// walkRules adds the tracing table to each node, traces one connection
// per pair, writes the counts and removes the table.
func (in *instance) walkRules(pairs []pair) error {
	dir := in.e.o.ruleWalk
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "# %s: rules evaluated (chains entered) per traced packet, per node\n", in.c.title)
	for _, n := range in.nodes {
		add := fmt.Sprintf("table inet %s { chain pre { type filter hook prerouting priority -500; "+
			"tcp dport { %[2]s } tcp flags & (syn|ack) == syn meta nftrace set 1; "+
			"tcp dport { %[2]s } tcp flags & psh == psh meta nftrace set 1; "+
			"tcp sport { %[2]s } tcp flags & psh == psh meta nftrace set 1; }\n}\n", walkTable, walkPorts(pairs))
		if out, err := nftIn(n.Path, add, "-f", "-"); err != nil {
			return fmt.Errorf("%s: add table %s: %v: %s", n.name, walkTable, err, out)
		}
		defer nftIn(n.Path, "", "delete", "table", "inet", walkTable)
	}
	for _, p := range pairs {
		fmt.Fprintf(&sum, "\n## %s (to %s)\n", p.kind, p.loadTo())
		for i, n := range in.nodes {
			order, err := ruleOrder(n.Path)
			if err != nil {
				return fmt.Errorf("%s: the rules' order: %w", n.name, err)
			}
			evs, err := in.traceOne(n.Path, p)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", p.kind, n.name, err)
			}
			for _, w := range walks(evs, order, p) {
				fmt.Fprintf(&sum, "node %d %-7s %3d rules (%s), %2d chains: %s\n", i, w.kind, w.rules, w.tableRules(), len(w.chains), strings.Join(w.chains, " > "))
			}
		}
	}
	file := filepath.Join(dir, fmt.Sprintf("%d-%s-walk.txt", in.seq, in.c.name))
	fmt.Fprintf(os.Stderr, "%s: rule walk in %s\n", in.c.name, file)
	return os.WriteFile(file, []byte(sum.String()), 0o644)
}

// walkPorts are the server side's ports of the pairs (and netload's),
// comma separated: what the tracing rules select.
func walkPorts(pairs []pair) string {
	ports := []string{strconv.Itoa(loadPort)}
	for _, p := range pairs {
		if s := strconv.Itoa(int(p.loadTo().Port())); !slices.Contains(ports, s) {
			ports = append(ports, s)
		}
	}
	return strings.Join(ports, ", ")
}

// nftIn runs nft with args in the namespace at ns, stdin from stdin.
func nftIn(ns, stdin string, args ...string) ([]byte, error) {
	cmd := exec.Command("nft", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := netops.InNetns(ns, cmd.Run)
	return out.Bytes(), err
}

// nfDial opens a netfilter netlink socket in the namespace at ns.
func nfDial(ns string) (*netlink.Conn, error) {
	f, err := os.Open(ns)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
}

// chainKey names a chain: family, table, chain.
func chainKey(family byte, table, chain string) string {
	fam := map[byte]string{unix.NFPROTO_INET: "inet", unix.NFPROTO_IPV4: "ip", unix.NFPROTO_IPV6: "ip6",
		unix.NFPROTO_BRIDGE: "bridge", unix.NFPROTO_NETDEV: "netdev", unix.NFPROTO_ARP: "arp"}[family]
	return fam + " " + table + " " + chain
}

// ruleOrder dumps every rule's handle in the namespace at ns, in its
// chain's order.
func ruleOrder(ns string) (map[string][]uint64, error) {
	c, err := nfDial(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
		Flags: netlink.Request | netlink.Dump}, Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}}
	msgs, err := c.Execute(req)
	if err != nil {
		return nil, err
	}
	out := map[string][]uint64{}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		ad.ByteOrder = binary.BigEndian
		var table, chain string
		var handle uint64
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_TABLE:
				table = ad.String()
			case unix.NFTA_RULE_CHAIN:
				chain = ad.String()
			case unix.NFTA_RULE_HANDLE:
				handle = ad.Uint64()
			}
		}
		k := chainKey(m.Data[0], table, chain)
		out[k] = append(out[k], handle)
	}
	return out, nil
}

// event is one trace event: a rule that matched (its handle and
// verdict), a chain's end, a base chain's policy.
type event struct {
	id      uint32
	chain   string // chainKey
	kind    uint32 // NFT_TRACETYPE_*
	handle  uint64
	verdict int32
	target  string // a jump's or goto's chain
	// The packet, on a base chain's first event: whether it is TCP,
	// its ports and SYN flag.
	headers bool
	tcp     bool
	dport   uint16
	sport   uint16
	syn     bool
}

// traceOne listens to the trace of the namespace at ns while one
// connection of the pair (one byte each way) is made, and returns its
// events once they stop coming.
func (in *instance) traceOne(ns string, p pair) ([]event, error) {
	c, err := nfDial(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.JoinGroup(unix.NFNLGRP_NFTRACE); err != nil {
		return nil, err
	}
	ch := make(chan event, 1<<16)
	go func() {
		defer close(ch)
		for {
			msgs, err := c.Receive()
			if err != nil {
				return
			}
			for _, m := range msgs {
				if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_TRACE) || len(m.Data) < 4 {
					continue
				}
				if ev, ok := parseTrace(m.Data); ok {
					ch <- ev
				}
			}
		}
	}()
	conn, err := netload.DialFrom(p.cli, p.loadTo(), 2*time.Second)
	if err != nil {
		return nil, err
	}
	b := []byte{1}
	_, err = conn.Write(b)
	if err == nil {
		_, err = conn.Read(b)
	}
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("the traced connection: %w", err)
	}
	// The events come asynchronously: read until none has come for
	// 300 ms.
	var evs []event
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs, nil
			}
			evs = append(evs, ev)
			continue
		case <-time.After(300 * time.Millisecond):
		}
		c.Close()
		for range ch {
		}
		return evs, nil
	}
}

// parseTrace reads one NFT_MSG_TRACE message.
func parseTrace(data []byte) (event, bool) {
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return event{}, false
	}
	ad.ByteOrder = binary.BigEndian
	ev := event{}
	var table, chain string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_TRACE_ID:
			ev.id = ad.Uint32()
		case unix.NFTA_TRACE_TABLE:
			table = ad.String()
		case unix.NFTA_TRACE_CHAIN:
			chain = ad.String()
		case unix.NFTA_TRACE_TYPE:
			ev.kind = ad.Uint32()
		case unix.NFTA_TRACE_RULE_HANDLE:
			ev.handle = ad.Uint64()
		case unix.NFTA_TRACE_VERDICT:
			ad.Nested(func(nd *netlink.AttributeDecoder) error {
				for nd.Next() {
					switch nd.Type() {
					case unix.NFTA_VERDICT_CODE:
						ev.verdict = int32(nd.Uint32())
					case unix.NFTA_VERDICT_CHAIN:
						ev.target = nd.String()
					}
				}
				return nil
			})
		case unix.NFTA_TRACE_NETWORK_HEADER:
			if h := ad.Bytes(); len(h) >= 20 {
				ev.headers = true
				ev.tcp = h[0]>>4 == 4 && h[9] == unix.IPPROTO_TCP || h[0]>>4 == 6 && h[6] == unix.IPPROTO_TCP
			}
		case unix.NFTA_TRACE_TRANSPORT_HEADER:
			if h := ad.Bytes(); len(h) >= 14 {
				ev.sport, ev.dport = binary.BigEndian.Uint16(h[0:2]), binary.BigEndian.Uint16(h[2:4])
				ev.syn = h[13]&0x12 == 0x02
			}
		}
	}
	ev.chain = chainKey(data[0], table, chain)
	if ev.target != "" {
		ev.target = chainKey(data[0], table, ev.target)
	}
	return ev, ad.Err() == nil
}

// walk is what one kind of traced packet walked through one node's
// tables: new (the SYN), request (the client's data packet), reply (the
// server's), outer (a traced packet's encapsulation, VXLAN's UDP).
type walk struct {
	kind   string
	rules  int
	chains []string
	// tables is the rules evaluated per table (family and name).
	tables map[string]int
}

// tableRules is w's rules per table, largest first.
func (w walk) tableRules() string {
	var names []string
	for t := range w.tables {
		names = append(names, t)
	}
	slices.SortFunc(names, func(a, b string) int {
		if w.tables[a] != w.tables[b] {
			return w.tables[b] - w.tables[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, t := range names {
		parts = append(parts, fmt.Sprintf("%s %d", t, w.tables[t]))
	}
	return strings.Join(parts, ", ")
}

var walkKinds = []string{"new", "request", "reply", "outer"}

// frame is a chain being walked and the position of the last rule of it
// that matched (-1: none yet).
type frame struct {
	chain string
	pos   int
}

// The verdict codes of the trace (linux/netfilter/nf_tables.h,
// linux/netfilter.h) and its event types.
const (
	nfDrop      = 0
	nfAccept    = 1
	nfStolen    = 2
	nfQueue     = 3
	nftJump     = -3
	nftGoto     = -4
	nftReturn   = -5
	tracePolicy = 1 // NFT_TRACETYPE_POLICY
	traceReturn = 2 // NFT_TRACETYPE_RETURN
	traceRule   = 3 // NFT_TRACETYPE_RULE
)

// walks reads a node's trace events into one walk per kind of packet,
// counting the rules evaluated as the file's comment says. Each base
// chain's walk begins with an event that carries the packet's headers,
// which say its kind (the kernel's trace IDs are not unique per packet:
// two packets of one connection may share one). The bench's own table
// (dpwalk) is left out.
func walks(evs []event, order map[string][]uint64, p pair) []walk {
	type state struct {
		kind  string
		stack []frame
	}
	server := map[uint16]bool{p.loadTo().Port(): true, loadPort: true}
	byKind := map[string]*walk{}
	byID := map[uint32]*state{}
	ours := func(chain string) bool { return strings.Contains(chain, " "+walkTable+" ") }
	count := func(st *state, f frame, all bool) {
		if ours(f.chain) || st.kind == "" {
			return
		}
		n := f.pos + 1
		if all {
			n = len(order[f.chain])
		}
		w := byKind[st.kind]
		w.rules += n
		t := f.chain[:strings.LastIndex(f.chain, " ")]
		w.tables[t] += n
	}
	unwind := func(st *state, all bool) {
		for i := len(st.stack) - 1; i >= 0; i-- {
			count(st, st.stack[i], all)
		}
		st.stack = nil
	}
	enter := func(st *state, chain string) {
		st.stack = append(st.stack, frame{chain: chain, pos: -1})
		if !ours(chain) && st.kind != "" {
			w := byKind[st.kind]
			w.chains = append(w.chains, strings.SplitN(chain, " ", 2)[1])
		}
	}
	for _, ev := range evs {
		st := byID[ev.id]
		if st == nil {
			st = &state{}
			byID[ev.id] = st
		}
		onStack := slices.ContainsFunc(st.stack, func(f frame) bool { return f.chain == ev.chain })
		if ev.headers || !onStack {
			// A base chain's walk begins (the last one's ended).
			unwind(st, true)
			if ev.headers {
				switch {
				case !ev.tcp:
					st.kind = "outer"
				case ev.syn:
					st.kind = "new"
				case server[ev.dport]:
					st.kind = "request"
				default:
					st.kind = "reply"
				}
				if byKind[st.kind] == nil {
					byKind[st.kind] = &walk{kind: st.kind, tables: map[string]int{}}
				}
			}
			enter(st, ev.chain)
		}
		// Chains above this one were walked to their end.
		for st.stack[len(st.stack)-1].chain != ev.chain {
			count(st, st.stack[len(st.stack)-1], true)
			st.stack = st.stack[:len(st.stack)-1]
		}
		top := &st.stack[len(st.stack)-1]
		switch ev.kind {
		case traceRule:
			if i := slices.Index(order[ev.chain][top.pos+1:], ev.handle); i >= 0 {
				top.pos += i + 1
			} else {
				top.pos++
			}
			switch ev.verdict {
			case nftJump:
				enter(st, ev.target)
			case nftGoto:
				count(st, *top, false)
				st.stack = st.stack[:len(st.stack)-1]
				enter(st, ev.target)
			case nftReturn:
				count(st, *top, false)
				st.stack = st.stack[:len(st.stack)-1]
			case nfAccept, nfDrop, nfStolen, nfQueue:
				// The hook's walk ends here: every chain on the stack
				// up to the rule that took it.
				unwind(st, false)
			}
		case traceReturn:
			// The chain walked to its end, back to the one that
			// jumped to it.
			count(st, *top, true)
			st.stack = st.stack[:len(st.stack)-1]
		case tracePolicy:
			// The base chain's policy: what is on the stack was walked
			// to its end.
			unwind(st, true)
		}
	}
	for _, st := range byID {
		unwind(st, true)
	}
	var out []walk
	for _, k := range walkKinds {
		if w := byKind[k]; w != nil {
			out = append(out, *w)
		}
	}
	return out
}
