package nft

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// TestServicesCheck: the periodic check (BeginCheck: the table read off
// the sync loop) repairs what someone changed in the table, sends
// nothing when the table is as the snapshot applied says, and takes what
// Apply wrote while it read the table (Services that came, went or
// changed meanwhile, the reads and the writes at once) for no drift.
func TestServicesCheck(t *testing.T) {
	onKernels(t, "svcck", func(t *testing.T, h *Handle) {
		s := NewServices(h, ServicesOptions{})
		snap := traceSnap()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(s.Apply(snap))
		c, err := h.nftConn()
		must(err)
		want := dumpSvc(t, h, c)
		// check runs a check, its read beside during (Apply's).
		check := func(during func()) []string {
			t.Helper()
			run, finish := s.BeginCheck()
			done := make(chan error, 1)
			go func() { done <- run() }()
			if during != nil {
				during()
			}
			must(<-done)
			rep, err := finish(true)
			must(err)
			return rep
		}
		n := Transactions()
		if rep := check(nil); rep != nil || Transactions() != n {
			t.Errorf("check of an unchanged table: repaired %q in %d transactions, want nothing", rep, Transactions()-n)
		}

		sp := &snap.Ports[0]
		id := spID(sp)
		tb := shardTableOf(spKey(sp))
		tamper := func() {
			must(c.SetDeleteElements(&nftables.Set{Table: tb, Name: ServiceIPs4}, []nftables.SetElement{{Key: frontElem(sp.Frontends[0].Addr, unix.IPPROTO_TCP, 80)}}))
			c.FlushChain(&nftables.Chain{Table: tb, Name: "ext-" + id})
			must(c.Flush())
		}
		tamper()
		rep := check(nil)
		if len(rep) != 2 || !slices.Contains(rep, "chain "+tb.Name+"/ext-"+id) || !strings.HasPrefix(rep[1], "elem "+tb.Name+"/"+ServiceIPs4+"\x00") {
			t.Errorf("check after an element deleted and a chain flushed: repaired %q, want those two", rep)
		}
		if got := dumpSvc(t, h, c); !sameSvcDump(got, want) {
			t.Error("the check left the table other than the snapshot says")
		}

		// Changes applied while the check reads: a Service goes, another's
		// endpoint leaves, one comes.
		next := traceSnap()
		next.Ports = slices.Delete(next.Ports, 0, 1)
		next.Ports[5].ClusterEndpoints = next.Ports[5].ClusterEndpoints[1:]
		n = Transactions()
		if rep := check(func() { must(s.Apply(next)) }); rep != nil {
			t.Errorf("check while changes were applied: repaired %q, want nothing (the changes are Apply's)", rep)
		}
		if got := Transactions() - n; got != 1 {
			t.Errorf("%d transactions, want 1 (the Apply's)", got)
		}
		// Both: only the drift is repaired, and the change stays.
		tb2 := shardTableOf(spKey(&next.Ports[2]))
		must(c.SetDeleteElements(&nftables.Set{Table: tb2, Name: ServiceIPs4}, []nftables.SetElement{{Key: frontElem(next.Ports[2].Frontends[0].Addr, unix.IPPROTO_UDP, 53)}}))
		must(c.Flush())
		rep = check(func() { must(s.Apply(snap)) })
		if len(rep) != 1 || !strings.HasPrefix(rep[0], "elem "+tb2.Name+"/"+ServiceIPs4+"\x00") {
			t.Errorf("check with a change and an element deleted: repaired %q, want the element", rep)
		}
		if got := dumpSvc(t, h, c); !sameSvcDump(got, want) {
			t.Error("after the check and the change back, the table is other than the snapshot says")
		}
		// A check that a full resync overtook is moot.
		run, finish := s.BeginCheck()
		tamper()
		must(s.Resync(snap))
		must(run())
		if rep, err := finish(true); rep != nil || err != nil {
			t.Errorf("check overtaken by a Resync: repaired %q (%v), want nothing", rep, err)
		}
	})
}
