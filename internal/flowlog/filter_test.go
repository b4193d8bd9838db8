package flowlog

import (
	"net/netip"
	"testing"
	"time"
)

func TestFilter(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr
	recs := []Record{
		0: {Time: t0, Verdict: Deny, Src: Endpoint{IP: ip("10.0.0.1"), Namespace: "shop", Pod: "web-0"},
			Dst:    Endpoint{IP: ip("10.0.0.2"), Namespace: "db", Pod: "pg-0"},
			Policy: &Policy{Kind: KindNetworkPolicy, Namespace: "db", Rule: RuleIsolation, Isolating: []string{"pg-only", "deny-all"}}},
		1: {Time: t0.Add(time.Minute), Verdict: Allow, Src: Endpoint{IP: ip("10.0.0.3"), Namespace: "db", Pod: "web-0"},
			Dst:    Endpoint{IP: ip("192.0.2.1")},
			Policy: &Policy{Kind: KindClusterNetworkPolicy, Name: "pg-only", Tier: TierBaseline, Rule: "0"}},
		2: {Time: t0.Add(2 * time.Minute), Verdict: StagedDeny, Src: Endpoint{IP: ip("192.0.2.1")},
			Dst:    Endpoint{IP: ip("10.0.0.1"), Namespace: "shop", Pod: "web-0"},
			Policy: &Policy{Kind: KindStagedNetworkPolicy, Namespace: "shop", Name: "web-lockdown", Rule: "1"}},
		3: {Time: t0.Add(3 * time.Minute), Verdict: Suppressed, Suppressed: &Summary{Count: 3}},
		4: {Time: t0.Add(4 * time.Minute), Verdict: Allow, Src: Endpoint{IP: ip("10.0.0.1"), Namespace: "shop", Pod: "web-0"},
			Dst: Endpoint{IP: ip("10.0.0.2"), Namespace: "db", Pod: "pg-0"}},
	}
	for _, tc := range []struct {
		name string
		f    Filter
		want []int
	}{
		{"none", Filter{}, []int{0, 1, 2, 3, 4}},
		{"namespace src or dst", Filter{Namespace: "db"}, []int{0, 1, 3, 4}},
		{"pod NS/NAME", Filter{Pod: "shop/web-0"}, []int{0, 2, 3, 4}},
		{"pod NAME, any namespace", Filter{Pod: "web-0"}, []int{0, 1, 2, 3, 4}},
		{"pod as dst", Filter{Pod: "db/pg-0"}, []int{0, 3, 4}},
		{"verdict", Filter{Verdict: Deny}, []int{0, 3}},
		{"verdict staged-deny", Filter{Verdict: StagedDeny}, []int{2, 3}},
		{"policy by an isolating name", Filter{Policy: "deny-all"}, []int{0, 3}},
		{"policy NAME, any namespace or none", Filter{Policy: "pg-only"}, []int{0, 1, 3}},
		{"policy NS/NAME", Filter{Policy: "db/pg-only"}, []int{0, 3}},
		{"policy NS/NAME of a staged one", Filter{Policy: "shop/web-lockdown"}, []int{2, 3}},
		{"since", Filter{Since: t0.Add(2 * time.Minute)}, []int{2, 3, 4}},
		{"since past a suppressed", Filter{Since: t0.Add(4 * time.Minute)}, []int{4}},
		{"together", Filter{Namespace: "shop", Verdict: Allow}, []int{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.f.Check(); err != nil {
				t.Fatal(err)
			}
			var got []int
			for i := range recs {
				if tc.f.Match(&recs[i]) {
					got = append(got, i)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("matched %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("matched %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestFilterCheck(t *testing.T) {
	for _, f := range []Filter{
		{Verdict: "dropped"}, {Pod: "a/b/c"}, {Pod: "/web"}, {Pod: "shop/"}, {Policy: "a/b/c"},
	} {
		if f.Check() == nil {
			t.Errorf("%+v: no error", f)
		}
	}
	if err := (Filter{Verdict: StagedAllow, Pod: "shop/web-0", Policy: "x"}).Check(); err != nil {
		t.Error(err)
	}
}
