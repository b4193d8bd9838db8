package policy

import (
	"cmp"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	cnpv1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// Staged policies (cnibox.io/v1alpha1 StagedNetworkPolicy and
// StagedClusterNetworkPolicy, docs/flowlog.md) are evaluated beside the
// enforced ones and never enforced: the model's Staged rules are the
// enforced tiers with the staged policies added, which the kernel never
// sees. Their sets are the model's like any (their elements kept as pods
// come and go); the table logs the verdicts of the pods a staged policy
// selects (FlowLog.Staged), and the flow log records a connection whose
// verdict the staged rules would change.

// stagedSubjectsKey defines the set of this node's pods a staged policy
// selects.
const stagedSubjectsKey = "staged subjects local"

// The IDs of staged policies: "snp/<namespace>/<name>", "scnp/<name>".
const (
	stagedNPPrefix  = policymodel.KindStagedNetworkPolicy + "/"
	stagedCNPPrefix = policymodel.KindStagedClusterPolicy + "/"
)

// SetStagedNetworkPolicy adds or replaces a StagedNetworkPolicy (np holds
// its namespace, name and spec).
func (e *Engine) SetStagedNetworkPolicy(np *networkingv1.NetworkPolicy) policymodel.Delta {
	return e.setCompiled(compileStagedNP(np))
}

// SetStagedClusterNetworkPolicy adds or replaces a
// StagedClusterNetworkPolicy.
func (e *Engine) SetStagedClusterNetworkPolicy(cnp *cnpv1.ClusterNetworkPolicy) policymodel.Delta {
	return e.setCompiled(compileStagedCNP(cnp))
}

// DeleteStagedNetworkPolicy removes a StagedNetworkPolicy.
func (e *Engine) DeleteStagedNetworkPolicy(namespace, name string) policymodel.Delta {
	delete(e.staged, stagedNPPrefix+namespace+"/"+name)
	e.caps.forget(namespace)
	return e.rebuildUnlessHeld()
}

// DeleteStagedClusterNetworkPolicy removes a StagedClusterNetworkPolicy.
func (e *Engine) DeleteStagedClusterNetworkPolicy(name string) policymodel.Delta {
	delete(e.staged, stagedCNPPrefix+name)
	return e.rebuildUnlessHeld()
}

// compileStagedNP and compileStagedCNP compile a staged policy as its
// enforced kind, under the staged kind's IDs (setCompiled files it apart).
func compileStagedNP(np *networkingv1.NetworkPolicy) *compiled {
	return stage(compileNP(np), policymodel.KindNetworkPolicy+"/", stagedNPPrefix)
}

func compileStagedCNP(cnp *cnpv1.ClusterNetworkPolicy) *compiled {
	return stage(compileCNP(cnp), policymodel.KindClusterPolicy+"/", stagedCNPPrefix)
}

// stage renames a compiled policy, its rules and its issues from the
// enforced kind's ID (prefix from) to the staged kind's (to).
func stage(c *compiled, from, to string) *compiled {
	re := func(id string) string { return to + strings.TrimPrefix(id, from) }
	c.id = re(c.id)
	for _, p := range c.dirs {
		if p == nil {
			continue
		}
		p.ID = re(p.ID)
		for i := range p.Rules {
			p.Rules[i].ID = policymodel.RuleID(re(string(p.Rules[i].ID)))
		}
	}
	for i := range c.issues {
		c.issues[i].Policy = re(c.issues[i].Policy)
	}
	return c
}

// IsStaged reports whether policy ID id is a staged policy's.
func IsStaged(id string) bool {
	return strings.HasPrefix(id, stagedNPPrefix) || strings.HasPrefix(id, stagedCNPPrefix)
}

// stagedRules is the staged model's rules (nil without a staged policy):
// the enforced tiers in and eg with the staged policies that select a pod
// of this node added, the NetworkPolicy tier's isolation that of both;
// their sets go into defs, those that select a pod here into active. The
// node's addresses are the caller's to set.
func (e *Engine) stagedRules(in, eg policymodel.Tiers, defs map[policymodel.SetID]*setDef, active map[string]bool, plan *capPlan) *policymodel.Rules {
	if len(e.staged) == 0 {
		return nil
	}
	clone := func(t policymodel.Tiers) policymodel.Tiers {
		return policymodel.Tiers{Admin: slices.Clone(t.Admin), NetworkPolicy: slices.Clone(t.NetworkPolicy), Baseline: slices.Clone(t.Baseline)}
	}
	r := &policymodel.Rules{Ingress: clone(in), Egress: clone(eg)}
	var subjects []podSel
	for _, c := range e.staged {
		if !plan.active[c.id] {
			continue
		}
		active[c.id] = true
		subjects = append(subjects, c.subject)
		if plan.closed[c.ns] == nil { // a closed namespace's: its isolation, below
			place(&r.Ingress, &r.Egress, c, defs)
		}
	}
	for dir, t := range []*policymodel.Tiers{&r.Ingress, &r.Egress} {
		def := e.isolatedDef(policymodel.Direction(dir), "staged ", e.policies, e.staged)
		t.Isolated = policymodel.SetIDOf(def.key)
		defs[t.Isolated] = def
		sortTiers(t)
	}
	defs[policymodel.SetIDOf(stagedSubjectsKey)] = &setDef{key: stagedSubjectsKey, kind: policymodel.Addrs, local: true, derived: true,
		match: func(p *Pod, ns *Namespace, node string) bool {
			for _, s := range subjects {
				if s.matches(p, ns, node) {
					return true
				}
			}
			return false
		}}
	return r
}

// place adds c's policies to the tiers of their directions, and its sets
// to defs.
func place(in, eg *policymodel.Tiers, c *compiled, defs map[policymodel.SetID]*setDef) {
	for dir, p := range c.dirs {
		if p == nil {
			continue
		}
		t := in
		if policymodel.Direction(dir) == policymodel.Egress {
			t = eg
		}
		switch p.Tier {
		case policymodel.TierAdmin:
			t.Admin = append(t.Admin, p)
		case policymodel.TierNetworkPolicy:
			t.NetworkPolicy = append(t.NetworkPolicy, p)
		default:
			t.Baseline = append(t.Baseline, p)
		}
	}
	for id, def := range c.defs {
		defs[id] = def
	}
}

// sortTiers puts the policies of each tier of t in evaluation order.
func sortTiers(t *policymodel.Tiers) {
	for _, ps := range [][]*policymodel.Policy{t.Admin, t.NetworkPolicy, t.Baseline} {
		slices.SortFunc(ps, func(a, b *policymodel.Policy) int {
			return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
		})
	}
}
