package nft

import (
	"bytes"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The services table's periodic check (issue 63): a resync split in two,
// so that the agent's sync loop is not held while the kernel's table is
// read. At 10,000 Services a Resync dumps some 10,000 chains and 100,000
// elements (seconds), and a change that came meanwhile waited for it.
//
//   - BeginCheck, on Apply's goroutine, notes the snapshot applied last
//     and from then on has Apply note each object it writes (touched);
//   - run, on any goroutine, reads the table on a connection of its own
//     and compares it with that snapshot's rendering, listing what
//     differs by object (drift); it reads nothing of the Services but its
//     options, so Apply goes on meanwhile;
//   - finish, on Apply's goroutine again, drops from the drift what Apply
//     wrote meanwhile (the kernel then differed from the old snapshot
//     because of a change, not of someone else's hand), and when
//     something is left, resyncs (Resync: a dump and the repair, on the
//     loop, only then; what it repaired only when the resync changed
//     something). A full reconcile in between (Apply's after a
//     failed transaction, a Resync) makes the check moot: it is dropped.
//
// The drift's vocabulary, shared with what Apply notes: "table TABLE",
// "chain TABLE/NAME", "set TABLE/NAME" (the set itself, or every element
// of it), "elem TABLE/NAME KEY" (one element; an interval set's are the
// set's); TABLE is the main table's or a shard's name.

// svcCheck is one check under way.
type svcCheck struct {
	h    *Handle // the check's own connection, on the Services' namespace
	opts ServicesOptions
	base *svcState // s.st when it began: another at finish, moot
	snap *svcmodel.Snapshot
	// ports are base's ServicePorts' states when it began (Apply
	// changes base's maps in place, never a state it holds).
	ports []*spState
	// drift is what run found different.
	drift []string
}

// BeginCheck starts a check of the table against the snapshot applied
// last (see above). run may be called on another goroutine, once, while
// Apply, Resync and Delete go on; finish must be called on theirs after
// run returned: with repair, it resyncs when the table differs in what no
// Apply wrote since BeginCheck and returns what differed, when the resync
// found the table so (else nothing); without, it
// only releases the check. With nothing applied yet, run reads nothing
// and finish repairs nothing (the next Apply resyncs anyway). One check
// at a time.
func (s *Services) BeginCheck() (run func() error, finish func(repair bool) (repaired []string, err error)) {
	if s.st == nil {
		return func() error { return nil }, func(bool) ([]string, error) { return nil, nil }
	}
	c := &svcCheck{h: &Handle{path: s.h.path, nsFD: s.h.nsFD, dial: s.h.dial}, opts: s.opts, base: s.st, snap: s.st.snap,
		ports: slices.Collect(maps.Values(s.st.ports))}
	s.touched = map[string]struct{}{}
	return c.run, func(repair bool) ([]string, error) { return s.finishCheck(c, repair) }
}

// run reads the kernel's tables and lists what differs from c.snap.
func (c *svcCheck) run() error {
	s := &Services{h: c.h, opts: c.opts}
	r := s.renderer(c.snap)
	st := outline(r, c.snap, c.ports)
	if err := c.h.bigBatchesOpen(); err != nil {
		return err
	}
	c.drift = nil
	// One table's rendering at a time, dropped once compared, and of the
	// ServicePorts' chains and sets only the shard's own: at 30,000
	// Services the whole rendering was some 200 MB of heap more for the
	// check's length (docs/benchmarks.md, one change at 30,000).
	for i := -1; i < svcShards; i++ {
		var spec *tableSpec
		if i < 0 {
			spec = st.mainSpec(s)
		} else {
			st.renderShard(r, i)
			spec = st.shardSpecs(i)[0]
		}
		have, err := c.h.dumpTable(spec)
		if err != nil {
			return classify(err)
		}
		c.drift = append(c.drift, specDrift(spec, have)...)
		if i >= 0 {
			st.renderShard(nil, i)
		}
	}
	stale, err := c.h.staleShards()
	if err != nil {
		return classify(err)
	}
	for _, tb := range stale {
		c.drift = append(c.drift, "table "+tb.Name)
	}
	return nil
}

// outline is the state of snap whose ServicePorts' states are ports'
// but for their chains and sets: what the main table and the shards' maps
// are made of (claims, slot tables), read from ports and shared with
// them (no write changes those), without rendering anything again;
// renderShard adds a shard's chains and sets, rendered anew (a write
// sets its own rules' and sets' table: the check must not read those).
func outline(r *renderer, snap *svcmodel.Snapshot, ports []*spState) *svcState {
	st := newSvcState(snap, r)
	for _, ps := range ports {
		pr := ps.r
		pr.chains, pr.sets = nil, nil
		st.claim(spKey(ps.sp), &spState{sp: ps.sp, r: pr})
	}
	return st
}

// renderShard renders the chains and sets of shard's ServicePorts into
// st with r, or with r nil drops them again.
func (st *svcState) renderShard(r *renderer, shard int) {
	for key, ps := range st.ports {
		if shardOfKey(key) != shard {
			continue
		}
		if r == nil {
			ps.r.chains, ps.r.sets = nil, nil
			continue
		}
		pr := r.render(ps.sp)
		ps.r.chains, ps.r.sets = pr.chains, pr.sets
	}
}

// finishCheck ends c (see BeginCheck).
func (s *Services) finishCheck(c *svcCheck, repair bool) ([]string, error) {
	touched := s.touched
	s.touched = nil
	_ = c.h.Close() // (its own socket; the namespace is s.h's)
	if !repair || s.st == nil || s.st != c.base {
		return nil, nil
	}
	var left []string
	for _, d := range c.drift {
		if !covered(d, touched) {
			left = append(left, d)
		}
	}
	if len(left) == 0 {
		return nil, nil
	}
	// The resync reads the table again, on the loop, with no write of
	// Apply beside: when it finds nothing to change, what the check saw
	// was its read's (a dump that crossed a resize or a commit of
	// someone else's that came and went), not the table's, and nothing
	// is reported repaired.
	changed, err := s.resync(s.st.snap)
	if err != nil || !changed {
		return nil, err
	}
	return left, nil
}

// covered reports whether Apply wrote what drift d names.
func covered(d string, touched map[string]struct{}) bool {
	if _, ok := touched[d]; ok {
		return true
	}
	if rest, ok := strings.CutPrefix(d, "elem "); ok {
		set, _, _ := strings.Cut(rest, "\x00")
		_, ok := touched["set "+set]
		return ok
	}
	return false
}

// touch notes that Apply wrote what names (while a check is under way).
func (s *Services) touch(names ...string) {
	if s.touched == nil {
		return
	}
	for _, n := range names {
		s.touched[n] = struct{}{}
	}
}

// elemName is the drift name of set's element key.
func elemName(set string, key []byte) string { return "elem " + set + "\x00" + string(key) }

// specDrift lists what of spec the kernel's table (have) lacks or holds
// otherwise, and, the table being the spec's own, what it holds besides.
func specDrift(spec *tableSpec, have *tableState) []string {
	if !have.exists {
		return []string{"table " + spec.table.Name}
	}
	tn := spec.table.Name + "/"
	var out []string
	named := make(map[string]bool, len(spec.sets))
	for _, ss := range spec.sets {
		name := ss.set.Name
		named[name] = true
		hs, ok := have.sets[name]
		switch {
		case !ok || !sameSetType(hs, ss.set):
			out = append(out, "set "+tn+name)
		case ss.kept:
		case ss.set.Interval:
			if add, del, whole := diffElems(have.elems[name], ss.elems); whole || len(add)+len(del) > 0 {
				out = append(out, "set "+tn+name)
			}
		default:
			out = append(out, elemDrift(tn+name, have.elems[name], ss.elems)...)
		}
	}
	for name := range have.sets {
		if !named[name] {
			out = append(out, "set "+tn+name)
		}
	}
	chains := make(map[string]bool, len(spec.chains))
	for _, cs := range spec.chains {
		chains[cs.name] = true
		hc, ok := have.chains[cs.name]
		if !ok || !cs.sameChain(hc) || !slices.EqualFunc(have.rules[cs.name], cs.rules, sameRule) {
			out = append(out, "chain "+tn+cs.name)
		}
	}
	for name := range have.chains {
		if !chains[name] {
			out = append(out, "chain "+tn+name)
		}
	}
	slices.Sort(out)
	return out
}

// elemDrift lists the keys of a (not interval) set whose elements differ
// between have and want: missing, extra, or with other data.
func elemDrift(set string, have []nftElem, want []nftables.SetElement) []string {
	wantBy := make(map[string]*nftables.SetElement, len(want))
	for i := range want {
		wantBy[string(want[i].Key)] = &want[i]
	}
	var out []string
	for _, e := range have {
		w, ok := wantBy[string(e.key)]
		if !ok {
			out = append(out, elemName(set, e.key))
			continue
		}
		delete(wantBy, string(e.key))
		if w.VerdictData != nil && w.VerdictData.Chain != e.jump || w.VerdictData == nil && !bytes.Equal(w.Val, e.data) {
			out = append(out, elemName(set, e.key))
		}
	}
	for k := range wantBy {
		out = append(out, elemName(set, []byte(k)))
	}
	return out
}
