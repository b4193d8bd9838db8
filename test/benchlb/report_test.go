package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := pct(ds, q); got != want {
			t.Errorf("pct(1..100 ms, %v) = %v, want %v", q, got, want)
		}
	}
	if got := pct(ds[:1], 0.99); got != 100*time.Millisecond {
		t.Errorf("pct of one = %v", got)
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct of none = %v", got)
	}
}

func TestWrite(t *testing.T) {
	r := &result{n: 3, createAll: time.Second, allocateAll: 2 * time.Second,
		burst:  []time.Duration{time.Second, 2 * time.Second, 1500 * time.Millisecond},
		writes: map[string]float64{"ok": 3}, doubled: []string{"198.18.0.1 held by a and b at version 7"}}
	var b bytes.Buffer
	r.write(&b)
	out := b.String()
	for _, want := range []string{
		"| 3 more created at once: a Service's create to its ingress | 3 | 1.500 s | 2.000 s | 2.000 s | 2.000 s (creating them: 1.000 s) |",
		"status writes ok 3, conflict 0, error 0",
		"ADDRESSES HELD TWICE (1): 198.18.0.1 held by a and b",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "one at a time") {
		t.Errorf("a row for what was not measured:\n%s", out)
	}
}

func TestOptions(t *testing.T) {
	var b bytes.Buffer
	for _, args := range [][]string{{"-n", "0"}, {"-workers", "0"}, {"-samples", "-1"}} {
		if _, err := parseOptions(args, &b); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	o, err := parseOptions(nil, &b)
	if err != nil || o.n != 1000 || o.kills != 5 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}
