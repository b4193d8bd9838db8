package policymodel

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
)

// TestTextForms: Action and Tier are stored by name, so a stored model
// never depends on the order of the constants; a name it does not know is
// an error, never another action.
func TestTextForms(t *testing.T) {
	for _, a := range []Action{Allow, Accept, Deny, Pass} {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var got Action
		if err := json.Unmarshal(b, &got); err != nil || got != a {
			t.Errorf("%s: %s read back as %s (%v)", a, b, got, err)
		}
	}
	if b, _ := json.Marshal(Deny); string(b) != `"deny"` {
		t.Errorf("Deny as JSON: %s, want \"deny\"", b)
	}
	var a Action
	if err := json.Unmarshal([]byte(`"drop"`), &a); err == nil {
		t.Errorf("an unknown action read as %s", a)
	}
	if err := json.Unmarshal([]byte(`2`), &a); err == nil {
		t.Errorf("an action by number read as %s", a)
	}
	if _, err := json.Marshal(Action(9)); err == nil {
		t.Error("an action out of range was written")
	}
	var tier Tier
	if err := json.Unmarshal([]byte(`"baseline"`), &tier); err != nil || tier != TierBaseline {
		t.Errorf("baseline read as %s (%v)", tier, err)
	}
}

// TestRulesRoundTrip: the rules as the store keeps them decide as before,
// the empty port list (matches nothing) kept apart from none (any port).
func TestRulesRoundTrip(t *testing.T) {
	pod, peer := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")
	m := &Model{Rules: Rules{Ingress: Tiers{Admin: []*Policy{{ID: "cnp/a", Subject: "subj", Rules: []Rule{
		{ID: "cnp/a/ingress/0", Action: Deny, Clauses: []Clause{{Peer: "peer", Ports: []PortRange{}}}},
		{ID: "cnp/a/ingress/1", Action: Accept, Clauses: []Clause{{Peer: "peer"}}},
	}}}}}, Sets: map[SetID]*Set{
		"subj": NewSet("subj", Addrs, "", AddrElem(pod)),
		"peer": NewSet("peer", CIDRs, "", Elem{Prefix: netip.MustParsePrefix("10.1.0.0/24")}),
	}}
	c := Conn{Src: peer, Dst: pod, Proto: TCP, Port: 80}
	want := Verdict{Allowed: true, Rule: "cnp/a/ingress/1"}
	if v := m.Evaluate(Ingress, c); v != want {
		t.Fatalf("model: %+v, want %+v", v, want)
	}
	b, err := json.Marshal(&m.Rules)
	if err != nil {
		t.Fatal(err)
	}
	var back Rules
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	v, err := back.Evaluate(Ingress, c, modelSets(m.Sets))
	if err != nil || v != want {
		t.Errorf("read back from %s: %+v (%v), want %+v", b, v, err, want)
	}
}

type failing struct{}

var errLookup = errors.New("lookup failed")

func (failing) Has(SetID, Elem) (bool, error) { return false, errLookup }

// TestEvaluateLookupError: a set that cannot be asked is an error, never a
// verdict.
func TestEvaluateLookupError(t *testing.T) {
	r := &Rules{Egress: Tiers{Isolated: "iso"}}
	c := Conn{Src: netip.MustParseAddr("10.1.0.2"), Dst: netip.MustParseAddr("10.1.0.3"), Proto: UDP, Port: 53}
	if _, err := r.Evaluate(Egress, c, failing{}); !errors.Is(err, errLookup) {
		t.Errorf("err %v, want %v", err, errLookup)
	}
}
