//go:build !nokube

package policy

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/agent/loggedflows"
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
func (w *watcher) runFlowLog(ctx context.Context, out FlowLogWriter, counts *loggedflows.Counts, log *slog.Logger) {
	r, err := loggedflows.Open("")
	if err != nil {
		log.Error("flow log: no verdicts will be logged", "err", err)
		return
	}
	log.Info("flow log: reading the policy table's verdicts", "group", policymodel.FlowLogGroup,
		"everywhere", w.cfg.FlowLogAll, "annotation", FlowLogAnnotation)
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
	err = r.Run(ctx, func(evs []loggedflows.Event) {
		recs := w.records(evs)
		for i := range recs {
			if counts != nil {
				k := loggedflows.Key{Verdict: string(recs[i].Verdict)}
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

// records names the policy, rule and pods of each event: the watcher's
// lock is held only to take a snapshot (the model and the batch's pods);
// the records, and the staged evaluation within the batch's budget, are
// made without it (stagedEvals).
func (w *watcher) records(evs []loggedflows.Event) []flowlog.Record {
	addrs := make([]netip.Addr, 0, 2*len(evs))
	for _, ev := range evs {
		addrs = append(addrs, ev.Src.Addr(), ev.Dst.Addr())
	}
	w.mu.Lock()
	s := w.e.snapshot(addrs...)
	w.mu.Unlock()
	s.serviceOf = w.cfg.ServiceOf
	w.stagedEval.begin(s.m.Generation)
	out := make([]flowlog.Record, 0, len(evs))
	for _, ev := range evs {
		out = s.appendRecords(out, ev, &w.stagedEval)
	}
	if n := w.stagedEval.end(time.Now()); n > 0 {
		w.cfg.Log.Warn("flow log: staged verdicts not evaluated: the batch's budget was spent (docs/flowlog.md)",
			"skipped", n, "budget", stagedBudget)
	}
	return out
}

// appendRecords appends what ev makes of the flow log (for tests: the
// engine's snapshot, no budget).
func (e *Engine) appendRecords(out []flowlog.Record, ev loggedflows.Event) []flowlog.Record {
	return e.snapshot(ev.Src.Addr(), ev.Dst.Addr()).appendRecords(out, ev, nil)
}

// record is ev as the flow log writes it (for tests).
func (e *Engine) record(ev loggedflows.Event) flowlog.Record {
	return e.snapshot(ev.Src.Addr(), ev.Dst.Addr()).record(ev)
}

// appendRecords appends what ev makes of the flow log: its record where
// the flow log's scope takes it (the kernel also logs the pods of staged
// policies, and their default allows), and a staged-deny or staged-allow
// record where the staged rules would decide otherwise (evaluated by st:
// nil, at once).
func (s *snapshot) appendRecords(out []flowlog.Record, ev loggedflows.Event, st *stagedEvals) []flowlog.Record {
	rec := s.record(ev)
	if s.inLogScope(ev) {
		out = append(out, rec)
	}
	if rec.Reason != "" {
		return out // no policy decided: nothing a staged one would change
	}
	if sr, ok := s.stagedRecord(ev, rec, st); ok {
		out = append(out, sr)
	}
	return out
}

// inLogScope reports whether the flow log's scope takes ev: its verdict
// is logged everywhere, or for its pod or its peer; a default allow
// (logged for the staged policies only) never is.
func (s *snapshot) inLogScope(ev loggedflows.Event) bool {
	if kind, _ := policymodel.ParseKey(ev.Counter); kind == policymodel.KeyDefault {
		return false
	}
	scope := s.m.Log.Deny
	if ev.Allow {
		scope = s.m.Log.Allow
	}
	set := s.m.Sets[scope.Set]
	return scope.All || set != nil && (set.Contains(ev.Src.Addr()) || set.Contains(ev.Dst.Addr()))
}

// stagedRecord is the record of what the staged rules would do with ev's
// connection, if that is not what was done (rec is ev's record), and st
// evaluates it within its budget.
func (s *snapshot) stagedRecord(ev loggedflows.Event, rec flowlog.Record, st *stagedEvals) (flowlog.Record, bool) {
	subjects := s.m.Sets[s.m.Log.Staged]
	if s.m.Staged == nil || subjects == nil {
		return rec, false
	}
	dir, self := policymodel.Ingress, ev.Dst.Addr()
	if rec.Direction == flowlog.Egress {
		dir, self = policymodel.Egress, ev.Src.Addr()
	}
	if !subjects.Contains(self) {
		return rec, false
	}
	staged := &policymodel.Model{Rules: *s.m.Staged, Sets: s.m.Sets}
	sv, ok := st.evaluate(staged, s.m.Generation, dir, policymodel.Conn{Src: ev.Src.Addr(), Dst: ev.Dst.Addr(), Proto: policymodel.Protocol(ev.Proto), Port: ev.Dst.Port()})
	if !ok || sv.Allowed == ev.Allow || sv.Rule == "node" {
		return rec, false
	}
	rec.Verdict = flowlog.StagedDeny
	if sv.Allowed {
		rec.Verdict = flowlog.StagedAllow
	}
	v := Attribution{Direction: dir}
	if sv.Rule == "" { // the staged rules' isolation
		for _, p := range staged.Tiers(dir).NetworkPolicy {
			if set := s.m.Sets[p.Subject]; set != nil && set.Contains(self) {
				v.Isolating = append(v.Isolating, p.ID)
			}
		}
	} else if r, p := ruleIn(s.m.Staged, sv.Rule); r != nil {
		_, _, v.Rule, _ = r.ID.Split()
		v.Policy, v.Tier = p.ID, p.Tier
	}
	rec.Policy = recordPolicy(v)
	return rec, true
}

// record is ev as the flow log writes it. A packet the table dropped as
// INVALID has a reason, no policy and no direction (it was dropped before
// either walk).
func (s *snapshot) record(ev loggedflows.Event) flowlog.Record {
	if ev.Counter == policymodel.CounterInvalid {
		src, dst := s.pods[ev.Src.Addr()], s.pods[ev.Dst.Addr()]
		return flowlog.Record{
			Time: ev.Time.UTC(), Node: s.node, Verdict: flowlog.Deny, Reason: flowlog.ReasonInvalid,
			Proto: flowlog.ProtoNumber(ev.Proto),
			Src:   flowlog.Endpoint{IP: ev.Src.Addr(), Port: ev.Src.Port(), Namespace: src.Namespace, Pod: src.Name},
			Dst:   flowlog.Endpoint{IP: ev.Dst.Addr(), Port: ev.Dst.Port(), Namespace: dst.Namespace, Pod: dst.Name},
		}
	}
	v, ok := s.Describe(ev.Counter, ev.Src.Addr(), ev.Dst.Addr())
	rec := flowlog.Record{
		Time: ev.Time.UTC(), Node: s.node, Verdict: flowlog.Deny,
		Direction: flowlog.Direction(v.Direction.String()),
		Proto:     flowlog.ProtoNumber(ev.Proto),
		Src:       flowlog.Endpoint{IP: ev.Src.Addr(), Port: ev.Src.Port(), Namespace: v.Src.Namespace, Pod: v.Src.Name},
		Dst:       flowlog.Endpoint{IP: ev.Dst.Addr(), Port: ev.Dst.Port(), Namespace: v.Dst.Namespace, Pod: v.Dst.Name},
		Service:   s.service(ev),
	}
	if ev.Allow {
		rec.Verdict = flowlog.Allow
	}
	if !ok || v.Default {
		return rec // a rule that changed since: the record says what it can
	}
	rec.Policy = recordPolicy(v)
	return rec
}

// service is the record's service of ev: the frontend its connection was
// sent to before a DNAT, named when s.serviceOf knows it; nil when no
// DNAT changed it.
func (s *snapshot) service(ev loggedflows.Event) *flowlog.Service {
	if !ev.Frontend.IsValid() {
		return nil
	}
	out := &flowlog.Service{IP: ev.Frontend.Addr(), Port: ev.Frontend.Port()}
	if s.serviceOf != nil {
		if n, ok := s.serviceOf(ev.Proto, ev.Frontend); ok {
			out.Namespace, out.Name, out.PortName = n.Namespace, n.Name, n.Port
		}
	}
	return out
}

// recordPolicy is the record's policy of v.
func recordPolicy(v Attribution) *flowlog.Policy {
	if v.Policy == "" { // a NetworkPolicy's isolation
		p := &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Rule: flowlog.RuleIsolation}
		for _, id := range v.Isolating {
			_, ns, name := policymodel.SplitPolicyID(id)
			p.Namespace, p.Isolating = ns, append(p.Isolating, name)
			if p.Name == "" || IsStaged(id) && p.Kind != flowlog.KindStagedNetworkPolicy {
				p.Name = name // a staged one first: it is what isolates
			}
			if IsStaged(id) {
				p.Kind = flowlog.KindStagedNetworkPolicy
			}
		}
		return p
	}
	p := &flowlog.Policy{Kind: flowlog.KindNetworkPolicy, Rule: flowlog.RuleIndex(v.Rule)}
	_, p.Namespace, p.Name = policymodel.SplitPolicyID(v.Policy)
	if IsStaged(v.Policy) {
		p.Kind = flowlog.KindStagedNetworkPolicy
	}
	tier := ""
	switch v.Tier {
	case policymodel.TierAdmin:
		tier = flowlog.TierAdmin
	case policymodel.TierBaseline:
		tier = flowlog.TierBaseline
	}
	if tier != "" {
		p.Kind, p.Tier = flowlog.KindClusterNetworkPolicy, tier
		if IsStaged(v.Policy) {
			p.Kind = flowlog.KindStagedClusterNetworkPolicy
		}
	}
	return p
}
