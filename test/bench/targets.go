package main

import (
	"fmt"
	"math"
)

// delFloorOps returns the floor rows a case's DEL is judged against: the
// link delete in the bench's process and by a fresh process, of the kind of
// link the case deletes.
func delFloorOps(c *cniCase) (inProcess, fresh string) {
	if c.linkKind() == "macvlan" {
		return opMvDel, opMvExec
	}
	return opVethDel, opVethExec
}

// moreTargets are the targets of issue 16 (ptp and macvlan: ADD p50 <= 0.25
// of the reference, DEL p50 <= 1.15x the floor of the link kind, ops/s at
// C=32 >= 5x) and issue 17 (the podman chain: ADD and DEL p50 <= 0.2, ADD
// p99 at C=32 <= 0.05), for the cases that ran.
func (b *bench) moreTargets() []target {
	var out []target
	ran := map[string]bool{}
	for _, c := range b.cases {
		ran[c.key] = true
	}
	p50 := func(group, mode, op, side string) float64 {
		if s := summarise(b.lookup(group, mode, op, side)); s != nil {
			return s.P50
		}
		return math.NaN()
	}
	le := func(v, goal float64) *bool {
		if math.IsNaN(v) {
			return nil
		}
		ok := v <= goal
		return &ok
	}
	m := modeName(32)
	for _, key := range []string{"ptp", "macvlan"} {
		c := caseByKey(key)
		if !ran[key] {
			continue
		}
		n := c.name
		addO, addR := p50(n, "seq", opAdd, "ours"), p50(n, "seq", opAdd, "ref")
		v := ratio(addO, addR)
		out = append(out, target{n + " ADD p50, sequential (issue 16)", "<= 0.25", fmtRatio(v), le(v, 0.25),
			fmt.Sprintf("%s vs %s ms", fmtMs(addO), fmtMs(addR))})

		inProc, fresh := delFloorOps(c)
		delO := p50(n, "seq", opDel, "ours")
		fl, fx := p50(floorGroup, "seq", inProc, floorSide), p50(floorGroup, "seq", fresh, floorSide)
		what := fresh
		if math.IsNaN(fx) {
			fx, what = fl, inProc
		}
		vd := ratio(delO, fx)
		out = append(out, target{n + " DEL p50, sequential (issue 16)", "<= 1.15x kernel floor (" + what + ")", fmtRatio(vd) + "x floor",
			le(vd, 1.15), fmt.Sprintf("%s vs a %s ms floor; vs the delete in the bench's process: %sx; vs ref: %s",
				fmtMs(delO), fmtMs(fx), fmtRatio(ratio(delO, fl)), fmtRatio(ratio(delO, p50(n, "seq", opDel, "ref"))))})

		for _, op := range []string{opAdd, opDel} {
			o, r := summarise(b.lookup(n, m, op, "ours")), summarise(b.lookup(n, m, op, "ref"))
			v := math.NaN()
			note := ""
			if o != nil && r != nil {
				v = ratio(o.OpsSec, r.OpsSec)
				note = fmt.Sprintf("%.0f vs %.0f/s", o.OpsSec, r.OpsSec)
			}
			var ok *bool
			if !math.IsNaN(v) {
				met := v >= 5
				ok = &met
			}
			out = append(out, target{n + " " + op + " ops/s at C=32 (issue 16)", ">= 5x", fmtRatio(v) + "x", ok, note})
		}
	}
	if ran["podman"] {
		n := caseByKey("podman").name
		for _, op := range []string{opAdd, opDel} {
			o, r := p50(n, "seq", op, "ours"), p50(n, "seq", op, "ref")
			v := ratio(o, r)
			note := fmt.Sprintf("%s vs %s ms", fmtMs(o), fmtMs(r))
			if op == opAdd {
				if nop := p50(floorGroup, "seq", opChainNop, floorSide); !math.IsNaN(nop) {
					note += fmt.Sprintf("; 3 do-nothing Go plugins: %s ms", fmtMs(nop))
				}
			}
			out = append(out, target{n + " " + op + " p50, sequential (issue 17)", "<= 0.2", fmtRatio(v), le(v, 0.2), note})
		}
		v := math.NaN()
		note := ""
		if o, r := summarise(b.lookup(n, m, opAdd, "ours")), summarise(b.lookup(n, m, opAdd, "ref")); o != nil && r != nil {
			v = ratio(o.P99, r.P99)
			note = fmt.Sprintf("%s vs %s ms", fmtMs(o.P99), fmtMs(r.P99))
		}
		out = append(out, target{n + " ADD p99 at C=32 (issue 17)", "<= 0.05", fmtRatio(v), le(v, 0.05), note})
	}
	return out
}
