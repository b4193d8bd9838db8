package nft

import (
	"maps"
	"reflect"
	"testing"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The vocabulary's fields reach every reader (issue 61): a field added to
// Clause or Conn fails these tests until Evaluate, the renderer's
// fingerprint and the trace model all read it. A field the renderer
// forgot, or left out of the fingerprint (so a change of it left the old
// chain in place), shows here as a normal user, not as a hole in a kernel
// test that did not think of it.

// clauseFieldValues are the values the test gives each Clause field: for
// an egress rule of a pod of set "web" (traceModel's sets), each narrows
// what the rule allows. A field missing here fails the test.
func clauseFieldValues() map[string]any {
	return map[string]any{
		"Peer":     policymodel.SetID("db"),
		"Ports":    []policymodel.PortRange{{Proto: policymodel.TCP, First: 80, Last: 80}},
		"DstPorts": policymodel.SetID("named"),
		"Pairs":    policymodel.SetID("resolved"),
	}
}

// fieldsModel is traceModel's sets with one egress NetworkPolicy of web's
// pods whose one rule has clause cl: what it does not allow is dropped.
func fieldsModel(cl policymodel.Clause) *policymodel.Model {
	m, _ := traceModel()
	m.Ingress = policymodel.Tiers{}
	m.Egress = policymodel.Tiers{
		NetworkPolicy: []*policymodel.Policy{{ID: "np/x/web", Tier: policymodel.TierNetworkPolicy, Subject: "web", Rules: []policymodel.Rule{
			{ID: policymodel.NewRuleID("np/x/web", policymodel.Egress, 0), Action: policymodel.Allow, Clauses: []policymodel.Clause{cl}},
		}}},
		Isolated: "web",
	}
	return m
}

// traceEgress is the rendered rules' decision on c in m (the forward hook,
// a new connection), which with no ingress policy is egress's.
func traceEgress(m *policymodel.Model, c policymodel.Conn) bool {
	pc, _ := renderPolicy(&m.Rules, nil)
	tr := &tracer{pc: pc, sets: traceSets(m), c: c}
	return tr.run("fwd" + famOf(c))
}

// TestPolicyClauseFields: every field of Clause, set on its own, changes
// what Evaluate decides for some connection, changes the rendered chains'
// fingerprints (so a change of it is written to the kernel), and the
// rendered rules decide every connection as Evaluate does.
func TestPolicyClauseFields(t *testing.T) {
	t.Parallel()
	_, addrs := traceModel()
	values := clauseFieldValues()
	base := fieldsModel(policymodel.Clause{})
	basePC, _ := renderPolicy(&base.Rules, nil)
	baseFP := fingerprints(basePC)
	typ := reflect.TypeFor[policymodel.Clause]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			v, ok := values[f.Name]
			if !ok {
				t.Fatalf("Clause.%s has no value in this test: give it one, and make Evaluate (internal/policymodel), "+
					"the renderer and its rulesKey (policy_rules.go) and the tracer (policy_trace_test.go) read it", f.Name)
			}
			var cl policymodel.Clause
			reflect.ValueOf(&cl).Elem().Field(i).Set(reflect.ValueOf(v))
			m := fieldsModel(cl)
			pc, _ := renderPolicy(&m.Rules, nil)
			if maps.Equal(fingerprints(pc), baseFP) {
				t.Errorf("Clause.%s = %v leaves the chains' fingerprints as they are: a change of it would not reach the kernel", f.Name, v)
			}
			changed := 0
			traceConns(addrs, func(c policymodel.Conn) {
				want := m.Evaluate(policymodel.Egress, c)
				if want.Allowed != base.Evaluate(policymodel.Egress, c).Allowed {
					changed++
				}
				if want.Rule == policymodel.RuleNode || !m.Evaluate(policymodel.Ingress, c).Allowed {
					return
				}
				if got := traceEgress(m, c); got != want.Allowed {
					t.Errorf("Clause.%s = %v: %+v rendered %v, Evaluate %+v", f.Name, v, c, got, want)
				}
			})
			if changed == 0 {
				t.Errorf("Clause.%s = %v changes no verdict of Evaluate", f.Name, v)
			}
		})
	}
}

// TestPolicyConnFields: every field of Conn states its level (a tag
// `level:"connection"`, judged once, on a connection's first packet, or
// `level:"packet"`, judged on every packet), and each changes a verdict of
// Evaluate's that the rendered rules agree with: two connections that
// differ in that field alone are decided differently, by both.
func TestPolicyConnFields(t *testing.T) {
	t.Parallel()
	_, addrs := traceModel()
	var models []*policymodel.Model
	for name, v := range clauseFieldValues() {
		var cl policymodel.Clause
		reflect.ValueOf(&cl).Elem().FieldByName(name).Set(reflect.ValueOf(v))
		models = append(models, fieldsModel(cl))
	}
	typ := reflect.TypeFor[policymodel.Conn]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			switch f.Tag.Get("level") {
			case "connection", "packet":
			default:
				t.Errorf("Conn.%s has no level tag: say whether it is judged on a connection's first packet or on each", f.Name)
			}
			found := false
			for _, m := range models {
				// the grid's connections by all but field i
				byRest := map[policymodel.Conn][]policymodel.Conn{}
				traceConns(addrs, func(c policymodel.Conn) {
					rest := c
					reflect.ValueOf(&rest).Elem().Field(i).SetZero()
					byRest[rest] = append(byRest[rest], c)
				})
				for _, cs := range byRest {
					var allowed, denied *policymodel.Conn
					for j := range cs {
						if v := m.Evaluate(policymodel.Egress, cs[j]); v.Rule != policymodel.RuleNode && m.Evaluate(policymodel.Ingress, cs[j]).Allowed {
							if v.Allowed {
								allowed = &cs[j]
							} else {
								denied = &cs[j]
							}
						}
					}
					if allowed == nil || denied == nil {
						continue
					}
					found = true
					if !traceEgress(m, *allowed) || traceEgress(m, *denied) {
						t.Errorf("Conn.%s: Evaluate allows %+v and drops %+v; the rendered rules: %v, %v",
							f.Name, *allowed, *denied, traceEgress(m, *allowed), traceEgress(m, *denied))
					}
				}
			}
			if !found {
				t.Errorf("Conn.%s changes no verdict of Evaluate's over the test's grid: does Evaluate read it, does the grid (traceConns) vary it?", f.Name)
			}
		})
	}
}
