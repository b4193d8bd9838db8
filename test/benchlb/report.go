package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// result is what one run measured.
type result struct {
	n           int
	backlog     time.Duration   // -n waiting: the agent's start to the last ingress
	createAll   time.Duration   // creating the -n Services (the API's part)
	allocateAll time.Duration   // from the first create to the last ingress
	burst       []time.Duration // each of the -n: its create to its ingress
	single      []time.Duration // one at a time: create to ingress
	failover    []time.Duration // the leader killed to a new Service's ingress
	leaderCPU   time.Duration   // the leader's CPU time over the burst
	writes      map[string]float64
	doubled     []string
}

// pct is the q-quantile of ds (nearest rank: the smallest value with at
// least q of them at or below it); 0 for none.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

// write writes the table (rows only for what was measured) and the
// checks.
func (r *result) write(w io.Writer) {
	fmt.Fprintln(w, "| | n | p50 | p99 | max | all |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	row := func(what string, ds []time.Duration, all string) {
		if len(ds) == 0 {
			return
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", what, len(ds), secs(pct(ds, 0.5)), secs(pct(ds, 0.99)), secs(pct(ds, 1)), all)
	}
	all := ""
	if r.allocateAll > 0 {
		all = fmt.Sprintf("%s (creating them: %s)", secs(r.allocateAll), secs(r.createAll))
	}
	if r.backlog > 0 {
		fmt.Fprintf(w, "| %d waiting, then the agent started: its start to the last one's ingress | %d | | | | %s |\n", r.n, r.n, secs(r.backlog))
	}
	row(fmt.Sprintf("%d more created at once: a Service's create to its ingress", r.n), r.burst, all)
	row(fmt.Sprintf("one at a time beside the %d: create to ingress", 2*r.n), r.single, "")
	row("the leader SIGKILLed to a Service created then getting its ingress", r.failover, "")
	fmt.Fprintln(w)
	if r.allocateAll > 0 {
		var ws []string
		for _, k := range []string{"ok", "conflict", "error"} {
			ws = append(ws, fmt.Sprintf("%s %.0f", k, r.writes[k]))
		}
		fmt.Fprintf(w, "The leader over the %d created at once: CPU %s (user+system), status writes %s.\n", r.n, secs(r.leaderCPU), strings.Join(ws, ", "))
	}
	if len(r.doubled) == 0 {
		fmt.Fprintln(w, "No address was held by two Services at any version the watch reported.")
	} else {
		fmt.Fprintf(w, "ADDRESSES HELD TWICE (%d): %s\n", len(r.doubled), strings.Join(r.doubled, "; "))
	}
}
