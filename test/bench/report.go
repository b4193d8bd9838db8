package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// stats summarises one sample.
type stats struct {
	N      int     `json:"n"`
	Errors int     `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	OpsSec float64 `json:"ops_per_s"`
	CPU    float64 `json:"cpu_ms_per_op,omitempty"` // user+sys of the bench and the plugins, per call
}

func summarise(s *sample) *stats {
	if s == nil || len(s.lat) == 0 {
		return nil
	}
	l := append([]time.Duration(nil), s.lat...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(l)))) - 1
		i = max(0, min(i, len(l)-1))
		return ms(l[i])
	}
	return &stats{N: len(l), Errors: s.errs, P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: ms(l[len(l)-1]), OpsSec: s.opsPerSec(), CPU: s.cpuPerOp()}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// jsonLine is one JSON line of the report.
type jsonLine struct {
	Kind   string         `json:"kind"`
	Group  string         `json:"case"`
	Mode   string         `json:"mode,omitempty"`
	Op     string         `json:"op,omitempty"`
	Ours   *stats         `json:"ours,omitempty"`
	Ref    *stats         `json:"ref,omitempty"`
	Floor  *stats         `json:"floor,omitempty"`
	Ratios map[string]any `json:"ratio,omitempty"`
	Extra  map[string]any `json:"extra,omitempty"`
}

// emit queues one JSON line; report writes them after the tables.
func (b *bench) emit(l jsonLine) {
	bs, _ := json.Marshal(l)
	b.jsonLines = append(b.jsonLines, string(bs))
}

// row is one line of a printed table.
type row []string

func printTable(title string, header row, rows []row) {
	if len(rows) == 0 {
		return
	}
	fmt.Printf("\n### %s\n\n", title)
	width := make([]int, len(header))
	for _, r := range append([]row{header}, rows...) {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], len(c))
			}
		}
	}
	line := func(r row, sep bool) {
		var sb strings.Builder
		sb.WriteString("|")
		for i := range header {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			switch {
			case sep && i == 0:
				c = ":" + strings.Repeat("-", width[i]-1)
			case sep:
				c = strings.Repeat("-", width[i]-1) + ":"
			}
			if i == 0 {
				fmt.Fprintf(&sb, " %-*s |", width[i], c)
			} else {
				fmt.Fprintf(&sb, " %*s |", width[i], c)
			}
		}
		fmt.Println(sb.String())
	}
	line(header, false)
	line(nil, true)
	for _, r := range rows {
		line(r, false)
	}
}

// target is one of the goals, evaluated.
type target struct {
	what     string
	goal     string
	measured string
	ok       *bool
	note     string
}

func (b *bench) report(elapsed time.Duration) {
	ref := b.refName
	fmt.Printf("\n# cnibox vs reference plugins (%s)\n\n", ref)
	fmt.Printf("machine: %s; %d CPUs; kernel %s; %s; %d pods per batch, %d rounds, concurrency %v; bench took %s\n",
		hostDesc(), runtime.NumCPU(), kernel(), runtime.Version(), b.o.n, b.o.rounds, b.o.conc, elapsed.Round(time.Second))
	fmt.Printf("ours: %s (%s, copied for the run); ref: %s\n", b.o.bin, b.version, b.refDir)
	fmt.Println("times in ms; ratio = ours / ref (lower is better, except ops/s)")

	var targets []target
	// CNI cases.
	var rows []row
	for _, c := range b.cases {
		for _, conc := range b.o.conc {
			mode := modeName(conc)
			for _, op := range []string{opAdd, opCheck, opDel} {
				o := summarise(b.lookup(c.name, mode, op, "ours"))
				r := summarise(b.lookup(c.name, mode, op, "ref"))
				if o == nil && r == nil {
					continue
				}
				o, r = orZero(o), orZero(r)
				rp50, rp99, rops := ratio(o.P50, r.P50), ratio(o.P99, r.P99), ratio(o.OpsSec, r.OpsSec)
				rows = append(rows, row{c.name, mode, op,
					fmtMs(o.P50), fmtMs(o.P90), fmtMs(o.P99), fmtMs(o.Max), fmt.Sprintf("%.0f", o.OpsSec),
					fmtMs(r.P50), fmtMs(r.P90), fmtMs(r.P99), fmtMs(r.Max), fmt.Sprintf("%.0f", r.OpsSec),
					fmtRatio(rp50), fmtRatio(rp99), fmtRatio(rops), fmtMs(o.CPU), fmtMs(r.CPU), errCell(o, r)})
				b.emit(jsonLine{Kind: "cni", Group: c.name, Mode: mode, Op: op, Ours: o, Ref: r,
					Ratios: map[string]any{"p50": jnum(rp50), "p99": jnum(rp99), "ops_per_s": jnum(rops)}})
			}
		}
	}
	printTable("CNI calls through libcni (AddNetworkList / CheckNetworkList / DelNetworkList)",
		row{"case", "mode", "op", "ours p50", "p90", "p99", "max", "ops/s", "ref p50", "p90", "p99", "max", "ops/s", "p50 ratio", "p99 ratio", "ops/s ratio", "cpu ms/op ours", "ref", "errors ours/ref"}, rows)

	printTable("Where one call of ours goes (p50): libcni wall time vs the in-process time cnibox logs per role (exec + Go start-up + exit = the rest)",
		row{"case", "mode", "op", "libcni p50", "in-process", "rest", "per role: in-process p50 (steps)"}, b.breakdownRows())

	// Kernel floor.
	rows = nil
	for _, mode := range []string{"seq", modeName(maxInt(b.o.conc))} {
		for _, op := range floorOps {
			f := summarise(b.lookup(floorGroup, mode, op, floorSide))
			if f == nil {
				continue
			}
			rows = append(rows, row{op, mode, fmtMs(f.P50), fmtMs(f.P90), fmtMs(f.P99), fmtMs(f.Max), fmt.Sprintf("%.0f", f.OpsSec)})
			b.emit(jsonLine{Kind: "floor", Group: floorGroup, Mode: mode, Op: op, Floor: f})
		}
		if mode == "seq" && len(b.o.conc) > 0 && maxInt(b.o.conc) == 1 {
			break
		}
	}
	if len(rows) > 0 {
		// Our DEL and ADD next to the floor.
		for _, c := range b.cases {
			for _, mode := range []string{"seq", modeName(maxInt(b.o.conc))} {
				inProc, fresh := delFloorOps(c)
				fl := summarise(b.lookup(floorGroup, mode, inProc, floorSide))
				fx := orZero(summarise(b.lookup(floorGroup, mode, fresh, floorSide)))
				o := summarise(b.lookup(c.name, mode, opDel, "ours"))
				r := summarise(b.lookup(c.name, mode, opDel, "ref"))
				if fl == nil || o == nil {
					continue
				}
				r = orZero(r)
				rows = append(rows, row{"ours DEL " + c.name, mode, fmtMs(o.P50), fmtMs(o.P90), fmtMs(o.P99), fmtMs(o.Max), fmt.Sprintf("%.0f", o.OpsSec),
					fmtRatio(ratio(o.P50, fl.P50)), fmtRatio(ratio(o.P50, fx.P50)), fmtRatio(ratio(r.P50, fl.P50))})
			}
		}
	}
	printTable("Kernel floor: a bare veth pair (a macvlan) created / deleted through netops in this process, and deleted by a fresh process; a case's DEL is compared with the floor of its link kind",
		row{"what", "mode", "p50", "p90", "p99", "max", "ops/s", "p50 / link delete p50", "p50 / fresh-process delete p50", "ref p50 / link delete"}, rows)

	// host-local alone at scale.
	rows = nil
	sizes := append([]int{0}, b.o.scale...)
	var zeroOurs = map[string]float64{}
	for _, size := range sizes {
		mode := fmt.Sprintf("%d existing", size)
		for _, op := range []string{opAdd, opDel} {
			o := summarise(b.lookup(scaleGroup, mode, op, "ours"))
			r := summarise(b.lookup(scaleGroup, mode, op, "ref"))
			if o == nil || r == nil {
				continue
			}
			if size == 0 {
				zeroOurs[op] = o.P50
			}
			self := ratio(o.P50, zeroOurs[op])
			rows = append(rows, row{fmt.Sprint(size), op, fmtMs(o.P50), fmtMs(r.P50), fmtRatio(ratio(o.P50, r.P50)), fmtRatio(self), fmtMs(o.Max), fmtMs(r.Max)})
			b.emit(jsonLine{Kind: "scale", Group: scaleGroup, Mode: mode, Op: op, Ours: o, Ref: r,
				Ratios: map[string]any{"p50": jnum(ratio(o.P50, r.P50)), "ours_vs_ours_at_0": jnum(self)}})
		}
	}
	printTable(fmt.Sprintf("host-local alone, %s, one ADD and one DEL with N reservations already there (median of %d)", scaleSubnet, b.o.scaleReps),
		row{"reservations", "op", "ours", "ref", "ratio", "ours / ours at 0", "ours max", "ref max"}, rows)

	// Exec cost.
	rows = nil
	for _, p := range b.execPlugins() {
		o := b.lookup(execGroup, p, "VERSION", "ours")
		r := b.lookup(execGroup, p, "VERSION", "ref")
		if o == nil || r == nil {
			continue
		}
		om, rm := ms(median(o.lat)), ms(median(r.lat))
		rows = append(rows, row{p, fmtMs(om), fmtMs(rm), fmtRatio(ratio(om, rm))})
		b.emit(jsonLine{Kind: "exec", Group: execGroup, Mode: p, Op: "VERSION",
			Ours: summarise(o), Ref: summarise(r), Ratios: map[string]any{"p50": jnum(ratio(om, rm))}})
	}
	for _, f := range []string{"/bin/true", "static Go binary doing nothing"} {
		if s := b.lookup(execGroup, f, "VERSION", floorSide); s != nil {
			rows = append(rows, row{"floor: " + f, fmtMs(ms(median(s.lat))), "", ""})
			b.emit(jsonLine{Kind: "exec", Group: execGroup, Mode: f, Floor: summarise(s)})
		}
	}
	printTable(fmt.Sprintf("Exec cost of one call: CNI_COMMAND=VERSION, median of %d, ms", b.o.execRuns),
		row{"binary", "ours", "ref", "ratio"}, rows)

	// Peak RSS.
	rows = nil
	for _, p := range []string{"bridge", "portmap", "tuning"} {
		ok, rk := b.rssMedian(p, "ours"), b.rssMedian(p, "ref")
		if ok < 0 || rk < 0 {
			continue
		}
		rows = append(rows, row{p, fmt.Sprint(ok), fmt.Sprint(rk), fmtRatio(ratio(float64(ok), float64(rk)))})
		b.emit(jsonLine{Kind: "rss", Group: rssGroup, Mode: p, Op: opAdd,
			Extra: map[string]any{"ours_kib": ok, "ref_kib": rk}, Ratios: map[string]any{"median": jnum(ratio(float64(ok), float64(rk)))}})
	}
	for _, f := range []string{"/bin/true", b.nop} {
		if k := b.rssMedian(rssFloorName(f), floorSide); k >= 0 {
			rows = append(rows, row{rssFloorName(f), fmt.Sprint(k), "", ""})
			b.emit(jsonLine{Kind: "rss", Group: rssGroup, Mode: rssFloorName(f), Extra: map[string]any{"floor_kib": k}})
		}
	}
	printTable(fmt.Sprintf("Peak RSS of one ADD (wait4 rusage maxrss, KiB, median of %d; the reference bridge includes the host-local it execs)", b.o.rssRuns),
		row{"plugin", "ours", "ref", "ratio"}, rows)

	// Sizes.
	if b.sizes != nil {
		sz := b.sizes
		printTable(sizeGroup, row{"", "bytes", "MiB", "files"}, []row{
			{"ours: cnibox + symlinks", fmt.Sprint(sz.ours), fmt.Sprintf("%.1f", float64(sz.ours)/(1<<20)), fmt.Sprint(sz.oursFiles)},
			{"ref: " + b.refDir, fmt.Sprint(sz.ref), fmt.Sprintf("%.1f", float64(sz.ref)/(1<<20)), fmt.Sprint(sz.refFiles)},
			{"ratio", fmtRatio(ratio(float64(sz.ours), float64(sz.ref))), "", ""},
		})
		b.emit(jsonLine{Kind: "size", Group: sizeGroup,
			Extra:  map[string]any{"ours_bytes": sz.ours, "ref_bytes": sz.ref, "ours_files": sz.oursFiles, "ref_files": sz.refFiles},
			Ratios: map[string]any{"bytes": jnum(ratio(float64(sz.ours), float64(sz.ref)))}})
	}

	targets = b.targets()
	rows = nil
	for _, t := range targets {
		verdict := "not measured"
		if t.ok != nil {
			verdict = map[bool]string{true: "met", false: "NOT MET"}[*t.ok]
		}
		rows = append(rows, row{t.what, t.goal, t.measured, verdict, t.note})
		b.emit(jsonLine{Kind: "target", Group: t.what, Extra: map[string]any{"goal": t.goal, "measured": t.measured, "verdict": verdict}})
	}
	printTable("Targets (issues 3, 16, 17)", row{"case", "target (ours / ref)", "measured", "verdict", "note"}, rows)
	fmt.Println()
	if b.jsonFile == nil {
		fmt.Println("### JSON, one line per row")
		fmt.Println()
	}
	for _, l := range b.jsonLines {
		fmt.Fprintln(b.jsonOut, l)
	}
}

func orZero(s *stats) *stats {
	if s == nil {
		return &stats{P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	}
	return s
}

func errCell(o, r *stats) string {
	if o.Errors == 0 && r.Errors == 0 {
		return "0"
	}
	return fmt.Sprintf("%d / %d", o.Errors, r.Errors)
}

// jnum makes NaN and Inf JSON-safe (null).
func jnum(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return math.Round(v*10000) / 10000
}

func (b *bench) targets() []target {
	var out []target
	le := func(v, goal float64) *bool {
		if math.IsNaN(v) {
			return nil
		}
		ok := v <= goal
		return &ok
	}
	ge := func(v, goal float64) *bool {
		if math.IsNaN(v) {
			return nil
		}
		ok := v >= goal
		return &ok
	}
	p50 := func(group, mode, op, side string) float64 {
		if s := summarise(b.lookup(group, mode, op, side)); s != nil {
			return s.P50
		}
		return math.NaN()
	}
	stat := func(group, mode, op, side string) *stats { return orZero(summarise(b.lookup(group, mode, op, side))) }
	br, ch := cniCases[0].name, cniCases[1].name

	v := ratio(p50(br, "seq", opAdd, "ours"), p50(br, "seq", opAdd, "ref"))
	out = append(out, target{"bridge+host-local ADD p50, sequential", "<= 0.2", fmtRatio(v), le(v, 0.2), ""})

	// The DEL floor is the veth delete of a fresh process (a plugin is one);
	// without the helper, the veth delete in this process.
	fl := p50(floorGroup, "seq", opVethDel, floorSide)
	fx, what := p50(floorGroup, "seq", opVethExec, floorSide), "veth delete by a fresh process"
	if math.IsNaN(fx) {
		fx, what = fl, "veth delete"
	}
	vd := ratio(p50(br, "seq", opDel, "ours"), fx)
	out = append(out, target{"bridge+host-local DEL p50, sequential", "<= 1.15x kernel floor (" + what + ")", fmtRatio(vd) + "x floor",
		le(vd, 1.15), "vs the veth delete in the bench's process: " + fmtRatio(ratio(p50(br, "seq", opDel, "ours"), fl)) + "x; vs ref: " + fmtRatio(ratio(p50(br, "seq", opDel, "ours"), p50(br, "seq", opDel, "ref")))})

	m := modeName(32)
	for _, op := range []string{opAdd, opDel} {
		v := ratio(stat(br, m, op, "ours").OpsSec, stat(br, m, op, "ref").OpsSec)
		if stat(br, m, op, "ours").N == 0 {
			v = math.NaN()
		}
		out = append(out, target{"bridge+host-local " + op + " ops/s at C=32", ">= 5x", fmtRatio(v) + "x", ge(v, 5), ""})
	}

	v = ratio(p50(ch, "seq", opAdd, "ours"), p50(ch, "seq", opAdd, "ref"))
	note := ""
	if nop := p50(floorGroup, "seq", opChainNop, floorSide); !math.IsNaN(nop) {
		note = fmt.Sprintf("3 do-nothing Go plugins: %s ms = %s of ref", fmtMs(nop), fmtRatio(ratio(nop, p50(ch, "seq", opAdd, "ref"))))
	}
	out = append(out, target{"chain ADD p50, sequential", "<= 0.1", fmtRatio(v), le(v, 0.1), note})
	v = ratio(p50(ch, "seq", opDel, "ours"), p50(ch, "seq", opDel, "ref"))
	out = append(out, target{"chain DEL p50, sequential", "<= 0.2", fmtRatio(v), le(v, 0.2),
		"ours DEL / floor: " + fmtRatio(ratio(p50(ch, "seq", opDel, "ours"), fx)) + "x"})
	v = math.NaN()
	if o := stat(ch, m, opAdd, "ours"); o.N > 0 {
		v = ratio(o.P99, stat(ch, m, opAdd, "ref").P99)
	}
	out = append(out, target{"chain ADD p99 at C=32", "<= 0.05", fmtRatio(v), le(v, 0.05), ""})

	out = append(out, b.moreTargets()...)

	if len(b.o.scale) > 0 {
		big := maxInt(b.o.scale)
		mode := fmt.Sprintf("%d existing", big)
		for _, op := range []string{opAdd, opDel} {
			v := ratio(p50(scaleGroup, mode, op, "ours"), p50(scaleGroup, mode, op, "ref"))
			self := ratio(p50(scaleGroup, mode, op, "ours"), p50(scaleGroup, "0 existing", op, "ours"))
			var ok *bool
			if a, s := le(v, 0.05), le(self, 1.2); a != nil && s != nil {
				both := *a && *s
				ok = &both
			}
			out = append(out, target{fmt.Sprintf("host-local %s at %d reservations", op, big), "<= 0.05, and <= 1.2x ours at 0",
				fmtRatio(v) + "; " + fmtRatio(self) + "x", ok, ""})
		}
	}

	worst, worstP := math.NaN(), ""
	for _, p := range b.execPlugins() {
		o, r := b.lookup(execGroup, p, "VERSION", "ours"), b.lookup(execGroup, p, "VERSION", "ref")
		if o == nil || r == nil {
			continue
		}
		if v := ratio(ms(median(o.lat)), ms(median(r.lat))); math.IsNaN(worst) || v > worst {
			worst, worstP = v, p
		}
	}
	out = append(out, target{"exec cost of one call (VERSION)", "<= 1.0", fmtRatio(worst), le(worst, 1.0), "worst: " + worstP})

	worst, worstP = math.NaN(), ""
	for _, p := range []string{"bridge", "portmap", "tuning"} {
		o, r := b.rssMedian(p, "ours"), b.rssMedian(p, "ref")
		if o < 0 || r < 0 {
			continue
		}
		if v := ratio(float64(o), float64(r)); math.IsNaN(worst) || v > worst {
			worst, worstP = v, p
		}
	}
	out = append(out, target{"peak RSS of one ADD", "<= 1.0", fmtRatio(worst), le(worst, 1.0), "worst: " + worstP})

	v = math.NaN()
	if b.sizes != nil {
		v = ratio(float64(b.sizes.ours), float64(b.sizes.ref))
	}
	out = append(out, target{"size of everything installed", "<= 0.33", fmtRatio(v), le(v, 0.33), ""})
	return out
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func hostDesc() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if i := strings.Index(l, ":"); i >= 0 {
				return strings.TrimSpace(l[i+1:])
			}
		}
	}
	return "?"
}

func cniboxVersion(bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(out)), " ")
}
