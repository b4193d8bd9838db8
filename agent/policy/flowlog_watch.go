//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/cnibox/cnibox/agent/verdicts"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// FlowLogWriter is where the watcher writes the flow log's records
// (internal/flowlog's Writer: it holds the rate and rotates the file).
type FlowLogWriter interface {
	Write(flowlog.Record) error
	Flush(now time.Time) error
}

// runFlowLog reads the verdicts the table logs in the agent's namespace,
// names their policies and pods, and writes them to out, until ctx ends.
// The summary of what the rate dropped is flushed once a second.
func (w *watcher) runFlowLog(ctx context.Context, out FlowLogWriter, counts *verdicts.Counts, log *slog.Logger) {
	r, err := verdicts.Open("")
	if err != nil {
		log.Error("flow log: no verdicts will be logged", "err", err)
		return
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if err := out.Flush(now); err != nil {
					log.Warn("flow log: write", "err", err)
				}
			}
		}
	}()
	var lost uint64
	err = r.Run(ctx, func(evs []verdicts.Event) {
		recs := w.records(evs)
		for i := range recs {
			if counts != nil {
				k := verdicts.Key{Verdict: string(recs[i].Verdict)}
				if p := recs[i].Policy; p != nil {
					k.Kind, k.Namespace, k.Name = p.Kind, p.Namespace, p.Name
					if p.Rule == flowlog.RuleIsolation {
						k.Name = "" // the namespace's isolation, not one policy
					}
				}
				counts.Add(k)
			}
			if err := out.Write(recs[i]); err != nil {
				log.Warn("flow log: write", "err", err)
				break
			}
		}
		if n := r.Lost(); n != lost {
			log.Warn("flow log: verdicts lost before the rate limit (the kernel's buffer or the reader's queue was full)", "lost", n-lost)
			lost = n
			if counts != nil {
				counts.SetLost(n)
			}
		}
	})
	if err != nil {
		log.Error("flow log: no verdicts will be logged", "err", err)
	}
}

// records names the policy, rule and pods of each event (under the
// watcher's lock, once for the batch).
func (w *watcher) records(evs []verdicts.Event) []flowlog.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]flowlog.Record, 0, len(evs))
	for _, ev := range evs {
		out = append(out, w.e.record(ev))
	}
	return out
}

// record is ev as the flow log writes it.
func (e *Engine) record(ev verdicts.Event) flowlog.Record {
	v, ok := e.Describe(ev.Counter, ev.Src.Addr(), ev.Dst.Addr())
	rec := flowlog.Record{
		Time: ev.Time.UTC(), Node: e.node, Verdict: flowlog.Deny,
		Direction: flowlog.Direction(v.Direction.String()),
		Proto:     flowlog.ProtoNumber(ev.Proto),
		Src:       flowlog.Endpoint{IP: ev.Src.Addr(), Port: ev.Src.Port(), Namespace: v.Src.Namespace, Pod: v.Src.Name},
		Dst:       flowlog.Endpoint{IP: ev.Dst.Addr(), Port: ev.Dst.Port(), Namespace: v.Dst.Namespace, Pod: v.Dst.Name},
	}
	if ev.Allow {
		rec.Verdict = flowlog.Allow
	}
	if !ok {
		return rec // a rule that changed since: the record says what it can
	}
	rec.Policy = recordPolicy(v)
	return rec
}

// recordPolicy is the record's policy of v.
func recordPolicy(v Verdict) *flowlog.Policy {
	if v.Policy == "" { // a NetworkPolicy's isolation
		p := &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Rule: flowlog.RuleIsolation}
		for i, id := range v.Isolating {
			ns, name := splitPolicyID(id)
			p.Namespace, p.Isolating = ns, append(p.Isolating, name)
			if i == 0 {
				p.Name = name
			}
		}
		return p
	}
	p := &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Rule: flowlog.RuleIndex(v.Rule)}
	p.Namespace, p.Name = splitPolicyID(v.Policy)
	switch v.Tier {
	case policymodel.TierAdmin:
		p.Kind, p.Tier = flowlog.KindClusterNetworkPolicy, flowlog.TierAdmin
	case policymodel.TierBaseline:
		p.Kind, p.Tier = flowlog.KindClusterNetworkPolicy, flowlog.TierBaseline
	}
	return p
}

// splitPolicyID is the namespace ("" for a cluster-scoped policy) and name
// of a policy ID ("np/<ns>/<name>", "cnp/<name>").
func splitPolicyID(id string) (ns, name string) {
	_, rest, _ := strings.Cut(id, "/")
	if i := strings.IndexByte(rest, '/'); i >= 0 && strings.HasPrefix(id, "np/") {
		return rest[:i], rest[i+1:]
	}
	return "", rest
}
