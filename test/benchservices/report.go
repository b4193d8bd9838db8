package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// result is one proxy's row at one number of Services. A side that could
// not run says why in Unavailable (no number is made up for it); one that
// failed part way says so in Err, with what it measured before.
type result struct {
	Side      string  `json:"side"`
	Anchor    bool    `json:"anchor"` // kube-proxy: the ratios' numerator
	Services  int     `json:"services"`
	SyncS     float64 `json:"first_sync_s"`       // process start to the map holding every Service
	ChangeP50 float64 `json:"one_change_p50_ms"`  // create to the ClusterIP's element in the map
	ChangeP99 float64 `json:"one_change_p99_ms"`  // nearest rank
	ChangeMax float64 `json:"one_change_max_ms"`  //
	Samples   int     `json:"one_change_samples"` // how many changes were timed
	// APIP50 and APIP99: of each change, the Service's create call to the
	// API server's answer (the part of the change no proxy can shorten).
	APIP50 float64 `json:"api_create_p50_ms,omitempty"`
	APIP99 float64 `json:"api_create_p99_ms,omitempty"`
	RSSMiB float64 `json:"rss_mib"` // VmRSS after the first sync
	PSSMiB float64 `json:"pss_mib"` // smaps_rollup's Pss then
	Load   string  `json:"load"`    // the load average at the end of the row
	// Overflows counts the notification socket's overflows during the
	// row: its times after one are the last commit seen before a dump.
	Overflows   int    `json:"overflows,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
	Err         string `json:"error,omitempty"`
}

func (r *result) synced() bool  { return r.Unavailable == "" && r.SyncS > 0 }
func (r *result) changed() bool { return r.Unavailable == "" && r.Samples > 0 }

// percentiles are p50, p99 and the maximum (nearest rank).
func percentiles(v []float64) (p50, p99, mx float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}

// thousands writes n with commas (30,000).
func thousands(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func secs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

func msecs(v float64) string {
	if v >= 10000 {
		return secs(v / 1000)
	}
	if v < 10 {
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// ratio is a/b as "12.3x", or "-" when either is missing.
func ratio(a, b float64, ok bool) string {
	if !ok || a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", a/b)
}

// pair finds the anchor's and the other side's rows at n.
func pair(rs []*result, n int) (anchor, other *result) {
	for _, r := range rs {
		if r.Services != n {
			continue
		}
		if r.Anchor {
			anchor = r
		} else if other == nil {
			other = r
		}
	}
	return anchor, other
}

// sizes are the numbers of Services in rs, in order of first appearance.
func sizes(rs []*result) []int {
	var ns []int
	for _, r := range rs {
		if !slices.Contains(ns, r.Services) {
			ns = append(ns, r.Services)
		}
	}
	return ns
}

// writeTable writes the Markdown table: a row per side and number of
// Services, then the anchor's over the other's (how many times faster,
// how many times the memory).
func writeTable(w io.Writer, rs []*result) {
	dagger := false
	defer func() {
		if dagger {
			fmt.Fprintln(w, "\n† nftables notifications overflowed the watch's socket in that row: its times are the last commit seen before a dump of the map.")
		}
	}()
	fmt.Fprintln(w, "| Services x 4 endpoints | proxy | first sync | one change p50 | one change p99 (changes timed) | RSS after the first sync (PSS) | load |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | --- |")
	for _, n := range sizes(rs) {
		for _, r := range rs {
			if r.Services != n {
				continue
			}
			if r.Unavailable != "" {
				fmt.Fprintf(w, "| %s | %s | unavailable: %s | - | - | - | |\n", thousands(n), r.Side, r.Unavailable)
				continue
			}
			sync, p50, p99, mem := "-", "-", "-", "-"
			if r.synced() {
				sync = secs(r.SyncS)
				if r.Overflows > 0 {
					sync += " †"
					dagger = true
				}
				mem = fmt.Sprintf("%.1f MiB (%.1f)", r.RSSMiB, r.PSSMiB)
			}
			if r.changed() {
				p50, p99 = msecs(r.ChangeP50), fmt.Sprintf("%s (%d)", msecs(r.ChangeP99), r.Samples)
			}
			if r.Err != "" {
				sync += " (failed: " + oneLine(r.Err) + ")"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", thousands(n), r.Side, sync, p50, p99, mem, r.Load)
		}
		a, o := pair(rs, n)
		if a == nil || o == nil || o.Unavailable != "" {
			continue
		}
		fmt.Fprintf(w, "| %s | %s / %s | %s | %s | %s | %s | |\n", thousands(n), a.Side, o.Side,
			ratio(a.SyncS, o.SyncS, a.synced() && o.synced()),
			ratio(a.ChangeP50, o.ChangeP50, a.changed() && o.changed()),
			ratio(a.ChangeP99, o.ChangeP99, a.changed() && o.changed()),
			ratio(a.RSSMiB, o.RSSMiB, a.synced() && o.synced()))
	}
}

// oneLine is the first line of s, at most 300 characters, with no '|'.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return strings.ReplaceAll(s, "|", "/")
}

// goal is one of the goals and whether this run met it.
type goal struct {
	What   string
	Status string // "met", "not met" or "not measured"
	Why    string // the numbers, or why it was not measured
}

const (
	met         = "met"
	notMet      = "not met"
	notMeasured = "not measured"
)

// goals judges the goals from the rows: the first sync and one
// change (p50 and p99) at least 10x faster than the anchor's at 10,000
// Services; one change p99 at most 50 ms at 30,000; less memory than the
// anchor's at every size measured.
func goals(rs []*result) []goal {
	const speedN, p99N, factor, p99Max = 10000, 30000, 10.0, 50.0
	gs := []goal{
		{What: fmt.Sprintf("first sync >= %.0fx faster than kube-proxy at %s Services", factor, thousands(speedN))},
		{What: fmt.Sprintf("one change (p50 and p99) >= %.0fx faster than kube-proxy at %s Services", factor, thousands(speedN))},
		{What: fmt.Sprintf("one change p99 <= %.0f ms at %s Services", p99Max, thousands(p99N))},
		{What: "the agent with the proxy uses less memory (RSS) than kube-proxy alone"},
	}
	a, o := pair(rs, speedN)
	switch why := missing(a, o, speedN); {
	case why != "":
		gs[0].Status, gs[0].Why = notMeasured, why
		gs[1].Status, gs[1].Why = notMeasured, why
	default:
		gs[0].Status, gs[0].Why = judge(a.synced() && o.synced(), a.SyncS/o.SyncS >= factor,
			fmt.Sprintf("%s vs %s: %s", secs(a.SyncS), secs(o.SyncS), ratio(a.SyncS, o.SyncS, true)))
		gs[1].Status, gs[1].Why = judge(a.changed() && o.changed(),
			a.ChangeP50/o.ChangeP50 >= factor && a.ChangeP99/o.ChangeP99 >= factor,
			fmt.Sprintf("p50 %s vs %s: %s; p99 %s vs %s: %s", msecs(a.ChangeP50), msecs(o.ChangeP50), ratio(a.ChangeP50, o.ChangeP50, true),
				msecs(a.ChangeP99), msecs(o.ChangeP99), ratio(a.ChangeP99, o.ChangeP99, true)))
	}
	_, o = pair(rs, p99N)
	switch {
	case o == nil:
		gs[2].Status, gs[2].Why = notMeasured, fmt.Sprintf("no cnibox run at %s Services", thousands(p99N))
	case o.Unavailable != "":
		gs[2].Status, gs[2].Why = notMeasured, "cnibox unavailable: "+o.Unavailable
	default:
		gs[2].Status, gs[2].Why = judge(o.changed(), o.ChangeP99 <= p99Max, "p99 "+msecs(o.ChangeP99))
	}
	var less, more []string
	for _, n := range sizes(rs) {
		a, o := pair(rs, n)
		if missing(a, o, n) != "" || !a.synced() || !o.synced() {
			continue
		}
		s := fmt.Sprintf("%s: %.1f vs %.1f MiB", thousands(n), o.RSSMiB, a.RSSMiB)
		if o.RSSMiB < a.RSSMiB {
			less = append(less, s)
		} else {
			more = append(more, s)
		}
	}
	switch {
	case len(less)+len(more) == 0:
		gs[3].Status, gs[3].Why = notMeasured, "no size with both proxies' memory"
	case len(more) > 0:
		gs[3].Status, gs[3].Why = notMet, strings.Join(append(more, less...), "; ")
	default:
		gs[3].Status, gs[3].Why = met, strings.Join(less, "; ")
	}
	return gs
}

// missing says why the two sides at n cannot be compared ("" if they can).
func missing(a, o *result, n int) string {
	switch {
	case a == nil:
		return fmt.Sprintf("no kube-proxy run at %s Services", thousands(n))
	case o == nil:
		return fmt.Sprintf("no cnibox run at %s Services", thousands(n))
	case o.Unavailable != "":
		return "cnibox unavailable: " + o.Unavailable
	case a.Unavailable != "":
		return "kube-proxy unavailable: " + a.Unavailable
	}
	return ""
}

// judge is met or not met when measured, else not measured.
func judge(measured, ok bool, why string) (string, string) {
	switch {
	case !measured:
		return notMeasured, "a side has no number (see its error)"
	case ok:
		return met, why
	default:
		return notMet, why
	}
}

func writeGoals(w io.Writer, gs []goal) {
	fmt.Fprintln(w, "Goals (issue 63):")
	for _, g := range gs {
		fmt.Fprintf(w, "- %s: %s (%s)\n", g.What, strings.ToUpper(g.Status), g.Why)
	}
}

func writeJSON(w io.Writer, rs []*result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
