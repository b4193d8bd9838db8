package policynft_test

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/agent/policynft"
	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nft/nftfake"
)

// The MultiNetworkPolicy input of the Syncer, on nftfake's kernels, as any
// user: the node's and one per pod namespace (by path).

// podPolicy is a pod's table: net1 isolated in ingress, TCP 5555 from
// 192.0.2.1 allowed.
func podPolicy() *nft.PodPolicy {
	peer := policymodel.NewSet("speer", policymodel.Addrs, "the peer", policymodel.AddrElem(netip.MustParseAddr("192.0.2.1")))
	allow := &policymodel.Policy{ID: "mnp/t/in", Tier: policymodel.TierNetworkPolicy, Subject: "sself", Rules: []policymodel.Rule{{
		ID: "mnp/t/in/ingress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{
			Peer: "speer", Ports: []policymodel.PortRange{{Proto: policymodel.TCP, First: 5555, Last: 5555}},
		}},
	}}}
	return &nft.PodPolicy{Ifaces: []nft.PodIface{{Name: "net1", Ingress: nft.PodDir{Isolated: true, Policies: []*policymodel.Policy{allow}},
		Sets: []*policymodel.Set{peer}}}}
}

// podSyncer is a Syncer on a fake node whose pods' namespaces are the
// fake kernels of pods (by path), its Run running until the test ends;
// fail, if set, makes opening a namespace fail while it returns true.
func podSyncer(t *testing.T, resync time.Duration, pods map[string]*nftfake.Kernel, fail func() bool) *policynft.Syncer {
	s := policynft.NewOn(nft.OpenDial(nftfake.New().Dial()))
	t.Cleanup(func() { s.Close() })
	policynft.SetPodOpener(s, func(path string) (*nft.Handle, error) {
		k := pods[path]
		if k == nil || (fail != nil && fail()) {
			return nil, errors.New("no such namespace: " + path)
		}
		return nft.OpenDial(k.Dial()), nil
	})
	s.ResyncEvery(resync)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	for !policynft.Running(s) {
		time.Sleep(time.Millisecond)
	}
	return s
}

// podTable is the MultiNetworkPolicy table of k, canonical ("" none).
func podTable(k *nftfake.Kernel) string { return k.Table(nftables.TableFamilyINet, nft.MultiTable) }

// waitTable waits (a minute at most) until k's pod table is want.
func waitTable(t *testing.T, k *nftfake.Kernel, what, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); podTable(k) != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the pod's table is not the one written:\n%s", what, lineDiff(podTable(k), want))
		}
	}
}

// TestPodTableResyncRepairs: someone flushes a base chain of a pod's
// MultiNetworkPolicy table (its interface open), then deletes one; the
// Syncer's next resync compares with nothing it remembers and writes the
// table again, as the node's table's resync does. The watcher before
// compared with what it had written and never put it back.
func TestPodTableResyncRepairs(t *testing.T) {
	t.Parallel()
	pod := nftfake.New()
	s := podSyncer(t, 20*time.Millisecond, map[string]*nftfake.Kernel{"/run/netns/a": pod}, nil)
	s.SetPodSource(func() map[string]policynft.PodTable {
		return map[string]policynft.PodTable{"t/a": {Netns: "/run/netns/a", Policy: podPolicy()}}
	})
	waitTable(t, pod, "written", podTableOf(t, podPolicy()))
	want := podTable(pod)
	c, err := pod.Conn()
	must(t, err)
	table := &nftables.Table{Name: nft.MultiTable, Family: nftables.TableFamilyINet}
	for _, tamper := range []struct {
		what string
		do   func()
	}{
		{"input flushed", func() { c.FlushChain(&nftables.Chain{Table: table, Name: "input"}) }},
		{"output deleted", func() { c.DelChain(&nftables.Chain{Table: table, Name: "output"}) }},
		{"table deleted", func() { c.DelTable(table) }},
	} {
		tamper.do()
		must(t, c.Flush())
		if podTable(pod) == want {
			t.Fatalf("%s: the table did not change: the test shows nothing", tamper.what)
		}
		waitTable(t, pod, tamper.what, want)
	}
	if err := pod.Err(); err != nil {
		t.Errorf("the fake kernel was sent what it does not model: %v", err)
	}
}

// TestPodTableResyncLeavesEqual: the resync compares each pod's table
// with its kernel's, and one that is as written is not written again:
// three resyncs later the pod's kernel has committed no transaction. The
// resync before rewrote every pod's table (deleted and made again) at
// each period.
func TestPodTableResyncLeavesEqual(t *testing.T) {
	t.Parallel()
	pod := nftfake.New()
	s := podSyncer(t, 5*time.Millisecond, map[string]*nftfake.Kernel{"/run/netns/a": pod}, nil)
	s.SetPodSource(func() map[string]policynft.PodTable {
		return map[string]policynft.PodTable{"t/a": {Netns: "/run/netns/a", Policy: podPolicy()}}
	})
	waitTable(t, pod, "written", podTableOf(t, podPolicy()))
	batches, written := pod.Batches(), s.Stats().PodTables
	for deadline := time.Now().Add(time.Minute); s.Stats().PodTables < written+3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no three resyncs of the pod's table in a minute (%d)", s.Stats().PodTables-written)
		}
	}
	if got := pod.Batches() - batches; got != 0 {
		t.Errorf("three resyncs of an untouched pod table committed %d transactions, want none", got)
	}
	if got := podTable(pod); got != podTableOf(t, podPolicy()) {
		t.Errorf("the pod's table changed:\n%s", lineDiff(got, podTableOf(t, podPolicy())))
	}
}

// TestPodTableRetried: a pod's table that cannot be written (its
// namespace not there yet) is tried again after a wait, without another
// change and without a resync; the watcher before tried it again at the
// next change only (or its 30 s tick).
func TestPodTableRetried(t *testing.T) {
	t.Parallel()
	pod := nftfake.New()
	var fails atomic.Int32
	fails.Store(3)
	s := podSyncer(t, 0, map[string]*nftfake.Kernel{"/run/netns/a": pod}, func() bool { return fails.Add(-1) >= 0 })
	s.SetPodSource(func() map[string]policynft.PodTable {
		return map[string]policynft.PodTable{"t/a": {Netns: "/run/netns/a", Policy: podPolicy()}}
	})
	waitTable(t, pod, "written after three failures", podTableOf(t, podPolicy()))
	// the syncer counts the write once the kernel holds the table: wait
	// for the count, not only the table (fresh-test saw 0 written here)
	st := s.Stats()
	for deadline := time.Now().Add(time.Minute); st.PodTables == 0 && time.Now().Before(deadline); st = s.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.PodFailed != 3 || st.PodTables != 1 {
		t.Errorf("%d failed writes and %d written, want 3 and 1", st.PodFailed, st.PodTables)
	}
}

// TestPodTableUnchanged: a change of the input that leaves a pod's table
// as it is writes nothing; one that takes its isolation away removes it.
func TestPodTableUnchanged(t *testing.T) {
	t.Parallel()
	pod := nftfake.New()
	s := podSyncer(t, 0, map[string]*nftfake.Kernel{"/run/netns/a": pod}, nil)
	var p atomic.Pointer[nft.PodPolicy]
	p.Store(podPolicy())
	s.SetPodSource(func() map[string]policynft.PodTable {
		return map[string]policynft.PodTable{"t/a": {Netns: "/run/netns/a", Policy: p.Load()}}
	})
	waitTable(t, pod, "written", podTableOf(t, podPolicy()))
	batches := pod.Batches()
	s.PodTablesChanged()
	p.Store(podPolicy()) // the same table, made anew
	s.PodTablesChanged()
	p.Store(nil)
	s.PodTablesChanged()
	waitTable(t, pod, "isolation gone", "")
	if got := pod.Batches() - batches; got != 1 {
		t.Errorf("%d transactions, want 1 (the table's removal)", got)
	}
}

// podTableOf is the table ApplyPodPolicy writes for p in a fresh namespace.
func podTableOf(t *testing.T, p *nft.PodPolicy) string {
	k := nftfake.New()
	h := nft.OpenDial(k.Dial())
	defer h.Close()
	must(t, h.ApplyPodPolicy(p))
	return podTable(k)
}
