package policy

import (
	"slices"
	"strings"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/internal/policymodel"
)

// FlowLogAnnotation on a Namespace asks for the flow log of its pods'
// connections, as source or destination: "deny", "allow" or "allow,deny".
const FlowLogAnnotation = cluster.FlowLogAnnotation

// FlowLogSetting says which connections the flow log logs: those allowed,
// those denied, both or none (the agent's --flow-log, a namespace's
// FlowLogAnnotation).
type FlowLogSetting struct{ Allow, Deny bool }

// ParseFlowLogSetting reads "allow", "deny", "allow,deny" (any order, spaces
// around each); ok is false for anything else ("" is neither, and ok).
func ParseFlowLogSetting(s string) (v FlowLogSetting, ok bool) {
	if strings.TrimSpace(s) == "" {
		return v, true
	}
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "allow":
			v.Allow = true
		case "deny":
			v.Deny = true
		default:
			return FlowLogSetting{}, false
		}
	}
	return v, true
}

// SetFlowLog turns the flow log on: the namespaces' annotations are read
// from then on, and the verdicts v are logged for every connection (the
// agent's --flow-log). An engine that was never asked logs nothing.
func (e *Engine) SetFlowLog(v FlowLogSetting) policymodel.Delta {
	e.flowLogOn, e.flowLog = true, v
	return e.rebuildUnlessHeld()
}

// flowLogDefs adds to defs the sets of the pods whose namespaces ask for
// the flow log of a verdict, and returns where each verdict is logged. A
// set is defined by the namespaces' names, so a namespace that starts or
// stops asking makes a new set (and new log rules: rare).
func (e *Engine) flowLogDefs(defs map[policymodel.SetID]*setDef) policymodel.FlowLog {
	if !e.flowLogOn {
		return policymodel.FlowLog{}
	}
	var allow, deny []string
	for name, ns := range e.namespaces {
		if ns.FlowLog.Allow {
			allow = append(allow, name)
		}
		if ns.FlowLog.Deny {
			deny = append(deny, name)
		}
	}
	scope := func(all bool, verdict string, names []string) policymodel.LogScope {
		if all {
			return policymodel.LogScope{All: true}
		}
		if len(names) == 0 {
			return policymodel.LogScope{}
		}
		slices.Sort(names)
		def := &setDef{key: "flow-log " + verdict + " ns=" + strings.Join(names, ","), kind: policymodel.Addrs,
			match: func(p *Pod, ns *Namespace, _ string) bool { return ns != nil && slices.Contains(names, ns.Name) }}
		id := policymodel.SetIDOf(def.key)
		defs[id] = def
		return policymodel.LogScope{Set: id}
	}
	return policymodel.FlowLog{
		Allow: scope(e.flowLog.Allow, "allow", allow),
		Deny:  scope(e.flowLog.Deny, "deny", deny),
	}
}

// reflowLog rebuilds the model when a namespace (old, now ns; either nil:
// absent) starts or stops asking for the flow log: the sets of the logged
// namespaces are defined by their names.
func (e *Engine) reflowLog(d *policymodel.Delta, old, ns *Namespace) {
	var was, is FlowLogSetting
	if old != nil {
		was = old.FlowLog
	}
	if ns != nil {
		is = ns.FlowLog
	}
	if was != is && e.flowLogOn {
		d.Merge(e.rebuildUnlessHeld())
	}
}
