package policy

import (
	"time"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The flow log evaluates the staged rules for each logged verdict of a
// pod a staged policy selects, to record where they would decide
// otherwise. An evaluation walks every clause of the policies that select
// the pod, and a namespace's large policy makes each one costly (4,095
// named ports over ::/0 minus 120 /128s: 0.66 s each before Contains took
// sorted ranges, issue 60 finding 5). It runs outside the watcher's lock
// (snapshot); a verdict is cached per connection and model generation (a
// flood repeats its connections), and one batch of verdicts evaluates at
// most stagedBudget connections the cache does not know: the batch's
// other staged records are not written, and the agent logs how many (once
// a minute at most).

// stagedBudget is how many uncached staged evaluations one batch of
// logged verdicts may make.
const stagedBudget = 64

// stagedCacheMax bounds the cache of one model generation: past it, it
// starts again.
const stagedCacheMax = 4096

type stagedKey struct {
	dir  policymodel.Direction
	conn policymodel.Conn
}

// stagedEvals evaluates the staged rules for the flow log's batches (its
// goroutine only).
type stagedEvals struct {
	gen   uint64 // the model generation of the cache
	cache map[stagedKey]policymodel.Verdict
	left  int // uncached evaluations left to the batch
	// skipped counts the staged records not made since the last warning,
	// warned when that was.
	skipped int
	warned  time.Time
	// beforeEval, if set (tests), runs before each uncached evaluation.
	beforeEval func()
}

// begin starts a batch of the model of generation gen.
func (st *stagedEvals) begin(gen uint64) {
	if st.cache == nil || st.gen != gen {
		st.cache, st.gen = map[stagedKey]policymodel.Verdict{}, gen
	}
	st.left = stagedBudget
}

// end ends a batch: the staged records skipped since the last warning,
// when one is due (a minute after the last), else 0.
func (st *stagedEvals) end(now time.Time) int {
	if st.skipped == 0 || now.Sub(st.warned) < time.Minute {
		return 0
	}
	n := st.skipped
	st.skipped, st.warned = 0, now
	return n
}

// evaluate is m's verdict on c in dir (m of generation gen), from the
// cache or within the batch's budget; false when the budget is spent. A
// nil st evaluates at once.
func (st *stagedEvals) evaluate(m *policymodel.Model, gen uint64, dir policymodel.Direction, c policymodel.Conn) (policymodel.Verdict, bool) {
	if st == nil {
		return m.Evaluate(dir, c), true
	}
	k := stagedKey{dir, c}
	if v, ok := st.cache[k]; ok && gen == st.gen {
		return v, true
	}
	if st.left <= 0 {
		st.skipped++
		return policymodel.Verdict{}, false
	}
	st.left--
	if st.beforeEval != nil {
		st.beforeEval()
	}
	v := m.Evaluate(dir, c)
	if gen == st.gen {
		if len(st.cache) >= stagedCacheMax {
			clear(st.cache)
		}
		st.cache[k] = v
	}
	return v, true
}
