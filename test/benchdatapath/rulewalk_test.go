package main

import (
	"net/netip"
	"slices"
	"testing"
)

// TestWalks counts a made-up trace as the kernel walks the chains: a
// chain left by a verdict up to that rule, a chain walked to its end
// whole, the bench's own table left out, each packet's kind from the
// headers of its base chains' first events (one trace ID shared by two
// packets, as the kernel's may be).
func TestWalks(t *testing.T) {
	order := map[string][]uint64{
		"inet dpwalk pre":  {1, 2, 3},
		"inet t pre":       {10, 11, 12, 13},
		"inet t svc":       {20, 21, 22},
		"inet t empty-end": {30, 31},
		"ip u fwd":         {40, 41, 42, 43, 44},
	}
	p := pair{ip: netip.MustParseAddr("10.96.0.10"), port: 80}
	syn := event{headers: true, tcp: true, sport: 40000, dport: 80, syn: true}
	data := event{headers: true, tcp: true, sport: 40000, dport: 80}
	reply := event{headers: true, tcp: true, sport: 80, dport: 40000}
	at := func(h event, chain string, kind uint32, handle uint64, verdict int32, target string) event {
		h.id, h.chain, h.kind, h.handle, h.verdict, h.target = 7, chain, kind, handle, verdict, target
		return h
	}
	plain := event{}
	evs := []event{
		// The SYN: the bench's table (left out), then t's prerouting:
		// rule 11 jumps to svc, whose rule 21 jumps to empty-end, which
		// ends (return event); svc's rule 22 accepts: 2 (pre) + 3 (svc)
		// + 2 (empty-end) = 7. Then u's forward: its policy, 5.
		at(syn, "inet dpwalk pre", traceRule, 2, -1, ""),
		at(plain, "inet dpwalk pre", tracePolicy, 0, nfAccept, ""),
		at(syn, "inet t pre", traceRule, 11, nftJump, "inet t svc"),
		at(plain, "inet t svc", traceRule, 21, nftJump, "inet t empty-end"),
		at(plain, "inet t empty-end", traceReturn, 0, -1, ""),
		at(plain, "inet t svc", traceRule, 22, nfAccept, ""),
		at(syn, "ip u fwd", tracePolicy, 0, nfAccept, ""),
		// The client's data packet, same ID: t's prerouting to its
		// policy (4), u's forward accepted at its second rule (2).
		at(data, "inet t pre", tracePolicy, 0, nfAccept, ""),
		at(data, "ip u fwd", traceRule, 41, nfAccept, ""),
		// The reply: t's prerouting, rule 10 jumps to svc, which is
		// walked to its end without an event of its own (the kernel
		// leaves some out), then t's policy: 4 + 3.
		at(reply, "inet t pre", traceRule, 10, nftJump, "inet t svc"),
		at(plain, "inet t pre", tracePolicy, 0, nfAccept, ""),
	}
	got := walks(evs, order, p)
	want := []struct {
		kind   string
		rules  int
		chains []string
	}{
		{"new", 12, []string{"t pre", "t svc", "t empty-end", "u fwd"}},
		{"request", 6, []string{"t pre", "u fwd"}},
		{"reply", 7, []string{"t pre", "t svc"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d walks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].kind != w.kind || got[i].rules != w.rules || !slices.Equal(got[i].chains, w.chains) {
			t.Errorf("walk %d: got %s %d rules %v, want %s %d rules %v", i, got[i].kind, got[i].rules, got[i].chains, w.kind, w.rules, w.chains)
		}
	}
	if n := got[0].tables["inet t"]; n != 7 {
		t.Errorf("the SYN's rules in table inet t: %d, want 7", n)
	}
	if _, ok := got[0].tables["inet dpwalk"]; ok {
		t.Errorf("the bench's own table is counted: %v", got[0].tables)
	}
}
