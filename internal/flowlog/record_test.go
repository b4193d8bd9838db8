package flowlog

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRecordJSON: the records' field names and shapes are those of
// docs/flowlog.md, written by Writer with the time in UTC, and read back
// as they were.
func TestRecordJSON(t *testing.T) {
	at := time.Date(2026, 11, 22, 3, 27, 21, 883000000, time.FixedZone("CET", 3600))
	recs := []Record{{
		Time: at, Node: "node-1", Verdict: Deny, Direction: Ingress, Proto: ProtoNumber(6),
		Src: Endpoint{IP: netip.MustParseAddr("10.88.1.5"), Port: 43122, Namespace: "shop", Pod: "web-0"},
		Dst: Endpoint{IP: netip.MustParseAddr("10.88.2.7"), Port: 5432, Namespace: "shop", Pod: "db-0"},
		Policy: &Policy{Kind: KindNetworkPolicy, Namespace: "shop", Name: "db-only", Rule: RuleIsolation,
			Isolating: []string{"db-only", "default-deny"}},
	}, {
		Time: at, Node: "node-1", Verdict: StagedAllow, Direction: Egress, Proto: ProtoNumber(58),
		Src:    Endpoint{IP: netip.MustParseAddr("fd00::5"), Namespace: "shop", Pod: "web-0"},
		Dst:    Endpoint{IP: netip.MustParseAddr("2001:db8::1")},
		Policy: &Policy{Kind: KindClusterNetworkPolicy, Name: "no-internet", Tier: TierAdmin, Rule: RuleIndex(2)},
	}, {
		Time: at, Node: "node-1", Verdict: Allow, Direction: Egress, Proto: ProtoNumber(47),
		Src: Endpoint{IP: netip.MustParseAddr("10.88.1.5")},
		Dst: Endpoint{IP: netip.MustParseAddr("192.0.2.1")},
	}, {
		Time: at, Node: "node-1", Verdict: Allow, Direction: Ingress, Proto: ProtoNumber(6),
		Src:     Endpoint{IP: netip.MustParseAddr("10.88.1.5"), Port: 43124, Namespace: "shop", Pod: "web-0"},
		Dst:     Endpoint{IP: netip.MustParseAddr("10.88.2.7"), Port: 5432, Namespace: "shop", Pod: "db-0"},
		Service: &Service{IP: netip.MustParseAddr("10.96.0.40"), Port: 5432, Namespace: "shop", Name: "db", PortName: "pg"},
		Policy:  &Policy{Kind: KindNetworkPolicy, Namespace: "shop", Name: "db-only", Rule: RuleIndex(0)},
	}, {
		Time: at, Node: "node-1", Verdict: Suppressed,
		Suppressed: &Summary{Count: 7, Since: at.Add(-time.Second), Other: 2, Top: []Pair{
			{Src: netip.MustParseAddr("10.88.1.5"), Dst: netip.MustParseAddr("10.88.2.7"), Count: 5}}},
	}}
	want := []string{
		`{"time":"2026-11-22T02:27:21.883Z","node":"node-1","verdict":"deny","direction":"ingress","proto":"TCP",` +
			`"src":{"ip":"10.88.1.5","port":43122,"namespace":"shop","pod":"web-0"},` +
			`"dst":{"ip":"10.88.2.7","port":5432,"namespace":"shop","pod":"db-0"},` +
			`"policy":{"kind":"NetworkPolicy","namespace":"shop","name":"db-only","rule":"isolation","isolating":["db-only","default-deny"]}}`,
		`{"time":"2026-11-22T02:27:21.883Z","node":"node-1","verdict":"staged-allow","direction":"egress","proto":"ICMPv6",` +
			`"src":{"ip":"fd00::5","namespace":"shop","pod":"web-0"},"dst":{"ip":"2001:db8::1"},` +
			`"policy":{"kind":"ClusterNetworkPolicy","name":"no-internet","tier":"Admin","rule":"2"}}`,
		`{"time":"2026-11-22T02:27:21.883Z","node":"node-1","verdict":"allow","direction":"egress","proto":"47",` +
			`"src":{"ip":"10.88.1.5"},"dst":{"ip":"192.0.2.1"}}`,
		`{"time":"2026-11-22T02:27:21.883Z","node":"node-1","verdict":"allow","direction":"ingress","proto":"TCP",` +
			`"src":{"ip":"10.88.1.5","port":43124,"namespace":"shop","pod":"web-0"},` +
			`"dst":{"ip":"10.88.2.7","port":5432,"namespace":"shop","pod":"db-0"},` +
			`"service":{"ip":"10.96.0.40","port":5432,"namespace":"shop","name":"db","portName":"pg"},` +
			`"policy":{"kind":"NetworkPolicy","namespace":"shop","name":"db-only","rule":"0"}}`,
		`{"time":"2026-11-22T02:27:21.883Z","node":"node-1","verdict":"suppressed",` +
			`"suppressed":{"count":7,"since":"2026-11-22T02:27:20.883Z","top":[{"src":"10.88.1.5","dst":"10.88.2.7","count":5}],"other":2}}`,
	}
	w, path := testWriter(t, Options{})
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), data)
	}
	for i, line := range lines {
		if line != want[i] {
			t.Errorf("record %d:\n got %s\nwant %s", i, line, want[i])
		}
		var back Record
		if err := json.Unmarshal([]byte(line), &back); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		exp := recs[i]
		exp.Time = exp.Time.UTC()
		if exp.Suppressed != nil {
			s := *exp.Suppressed
			s.Since = s.Since.UTC()
			exp.Suppressed = &s
		}
		if !reflect.DeepEqual(back, exp) {
			t.Errorf("record %d read back as %+v, want %+v", i, back, exp)
		}
		again, _ := json.Marshal(back)
		if !bytes.Equal(again, []byte(line)) {
			t.Errorf("record %d written again: %s", i, again)
		}
	}
}

func TestProtoNumber(t *testing.T) {
	for n, want := range map[uint8]Proto{1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP", 47: "47", 0: "0"} {
		if got := ProtoNumber(n); got != want {
			t.Errorf("ProtoNumber(%d) = %q, want %q", n, got, want)
		}
	}
}
