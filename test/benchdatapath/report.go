package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report gathers every configuration's samples and loads, and prints the
// tables.
type report struct {
	o         *options
	started   time.Time
	loadStart string
	samples   map[string]map[string]*sample // config name -> pair kind -> all runs
	loads     map[string][]string           // config name -> "before -> after" per round
	done      []string                      // config names with samples, in -configs order
}

func newReport(o *options) *report {
	return &report{o: o, started: time.Now().UTC(), samples: map[string]map[string]*sample{}, loads: map[string][]string{}}
}

func (r *report) add(c config, round int, before, after string, res map[string]*sample) {
	r.loads[c.name] = append(r.loads[c.name], fmt.Sprintf("%s -> %s", first(before), first(after)))
	if len(res) == 0 {
		return
	}
	if r.samples[c.name] == nil {
		r.samples[c.name] = map[string]*sample{}
	}
	for pk, s := range res {
		if r.samples[c.name][pk] == nil {
			r.samples[c.name][pk] = &sample{}
		}
		r.samples[c.name][pk].merge(s)
	}
	if !slices.Contains(r.done, c.name) {
		r.done = append(r.done, c.name)
	}
}

// first is the 1-minute figure of a load average line.
func first(load string) string {
	f := strings.Fields(load)
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// metric is one column: its name, how to read it from a sample, how to
// print it, and whether more is better.
type metric struct {
	name   string
	get    func(*sample) []float64
	format string
	scale  float64
	higher bool
}

var metrics = []metric{
	{"TCP 1 stream (Gbit/s)", func(s *sample) []float64 { return s.TCP1 }, "%.2f", 1, true},
	{"TCP 4 streams (Gbit/s)", func(s *sample) []float64 { return s.TCP4 }, "%.2f", 1, true},
	{"TCP_RR p50 (µs)", func(s *sample) []float64 { return s.RRP50 }, "%.1f", 1, false},
	{"TCP_RR p99 (µs)", func(s *sample) []float64 { return s.RRP99 }, "%.1f", 1, false},
	{"TCP_RR (/s)", func(s *sample) []float64 { return s.RRRate }, "%.0f", 1, true},
	{"TCP_CRR (/s)", func(s *sample) []float64 { return s.CRR }, "%.0f", 1, true},
	{"UDP 64 B (kpps)", func(s *sample) []float64 { return s.UDP }, "%.0f", 1e-3, true},
}

// value is the median of a metric of config name's pair pk (ok false: not
// measured).
func (r *report) value(name, pk string, m metric) (float64, bool) {
	s := r.samples[name][pk]
	if s == nil || len(m.get(s)) == 0 {
		return 0, false
	}
	return median(m.get(s)), true
}

// ratio is a over b where more is better, b over a where less is (so
// that above 1 is always better than b).
func ratio(a, b float64, higher bool) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	if higher {
		return a / b
	}
	return b / a
}

// rows calls fn for each pod-to-pod row measured.
func (r *report) rows(fn func(c config, pk string)) {
	r.allRows(func(c config, pk string) {
		if !throughService(pk) {
			fn(c, pk)
		}
	})
}

// allRows calls fn for each row measured, pod to pod and through a
// Service.
func (r *report) allRows(fn func(c config, pk string)) {
	for _, name := range r.done {
		c := configByName(name)
		for _, pk := range pairKinds {
			if r.samples[name][pk] != nil {
				fn(c, pk)
			}
		}
	}
}

func (r *report) print(took time.Duration) {
	o := r.o
	fmt.Printf("\nbench-datapath: %s UTC, %d CPUs (%s), kernel %s; %d round(s) x %d run(s) of %v per measurement (medians of all), UDP payload %d B, %d policies; took %s\n",
		r.started.Format("2006-01-02 15:04"), runtime.NumCPU(), cpuModel(), kernel(), o.rounds, o.runs, o.dur, o.udpSize, o.policies, took.Round(time.Second))
	pin := "not bound to CPUs"
	if o.pin {
		pin = fmt.Sprintf("TCP_RR's and TCP_CRR's client and server on CPU %d, iperf3's UDP client on CPU %d and server on CPU %d, TCP unbound", serverCPU, clientCPU, serverCPU)
	}
	fmt.Printf("load average (1, 5, 15 min): %s at the start, %s at the end; %s\n\n", r.loadStart, loadavg(), pin)

	head := "| path | pods |"
	sep := "| --- | --- |"
	for _, m := range metrics {
		head += " " + m.name + " |"
		sep += " --- |"
	}
	n := 0
	r.rows(func(config, string) { n++ })
	if n > 0 {
		fmt.Println(head)
		fmt.Println(sep)
	}
	r.rows(func(c config, pk string) {
		line := fmt.Sprintf("| %s | %s |", rowTitle(c, pk), pk)
		for _, m := range metrics {
			v, _ := r.value(c.name, pk, m)
			line += " " + fmt.Sprintf(m.format, v*m.scale) + " |"
		}
		fmt.Println(line)
	})
	r.printServices()

	if r.samples["floor"] != nil {
		fmt.Println("\nOf the floor (same-node rows: of the bare veth pair; cross-node: of the plain underlay; latency: the floor's over the row's, so below 1 is slower than the floor):")
		fmt.Println()
		fmt.Println(head)
		fmt.Println(sep)
		r.rows(func(c config, pk string) {
			if c.kind == floorKind {
				return
			}
			line := fmt.Sprintf("| %s | %s |", rowTitle(c, pk), pk)
			for _, m := range metrics {
				v, _ := r.value(c.name, pk, m)
				f, _ := r.value("floor", pk, m)
				line += fmt.Sprintf(" %.2f |", ratio(v, f, m.higher))
			}
			fmt.Println(line)
		})
	}

	r.printGoals()

	fmt.Println("\nLoad average (1 min) before -> after each configuration, per round:")
	fmt.Println()
	head, sep = "| configuration |", "| --- |"
	for i := 1; i <= o.rounds; i++ {
		head += fmt.Sprintf(" round %d |", i)
		sep += " --- |"
	}
	fmt.Println(head)
	fmt.Println(sep)
	for _, name := range o.configs {
		if len(r.loads[name]) == 0 {
			continue
		}
		fmt.Printf("| %s | %s |\n", name, strings.Join(r.loads[name], " | "))
	}
}

// goal is one of issue 53's (or 65's) goals: the rows it applies to, what they are
// compared with, on which measures, and the least ratio it wants.
type goal struct {
	text    string
	applies func(c config, pk string) bool
	against func(c config) string // the configuration compared with
	on      []string              // metric name prefixes (none: all)
	want    float64
}

var goals = []goal{
	{"same-node pods >= 0.95 of the bare veth pair (throughput, CRR)",
		func(c config, pk string) bool { return c.kind == cniboxKind && pk == sameNode },
		func(config) string { return "floor" }, []string{"TCP 1", "TCP 4", "TCP_CRR"}, 0.95},
	{"cross-node vxlan >= 0.90 of the plain underlay (throughput)",
		func(c config, pk string) bool { return c.kind == cniboxKind && c.backend == "vxlan" && pk == crossNode },
		func(config) string { return "floor" }, []string{"TCP 1", "TCP 4"}, 0.90},
	{"never behind flanneld + the reference plugins (same backend)",
		func(c config, _ string) bool { return c.kind == cniboxKind && !c.policies && c.proxy == "" },
		func(c config) string { return "flannel-" + c.backend }, nil, 1},
	{"policies + flow log within 5% of none",
		func(c config, _ string) bool { return c.kind == cniboxKind && c.policies },
		func(c config) string { return "cnibox-" + c.backend }, nil, 0.95},
	{"policies + flow log never behind flanneld + kube-router (same backend; issue 65)",
		func(c config, _ string) bool { return c.kind == cniboxKind && c.policies },
		func(c config) string { return "flannel-" + c.backend + "-kube-router" }, nil, 1},
}

// printGoals checks issue 53's goals on the medians: one row per goal and
// row, the ratio of each measure the goal is about (bold: missed).
func (r *report) printGoals() {
	var lines []string
	for _, g := range goals {
		r.rows(func(c config, pk string) {
			if !g.applies(c, pk) || r.samples[g.against(c)] == nil {
				return
			}
			line := fmt.Sprintf("| %s | %s | %s |", g.text, rowTitle(c, pk), pk)
			for _, m := range metrics {
				v, ok1 := r.value(c.name, pk, m)
				b, ok2 := r.value(g.against(c), pk, m)
				in := len(g.on) == 0 || slices.ContainsFunc(g.on, func(p string) bool { return strings.HasPrefix(m.name, p) })
				switch {
				case !in || !ok1 || !ok2:
					line += " |"
				case math.Round(ratio(v, b, m.higher)*100)/100 < g.want: // as printed
					line += fmt.Sprintf(" **%.2f** |", ratio(v, b, m.higher))
				default:
					line += fmt.Sprintf(" %.2f |", ratio(v, b, m.higher))
				}
			}
			lines = append(lines, line)
		})
	}
	if len(lines) == 0 {
		return
	}
	fmt.Println("\nIssues 53's and 65's goals on these medians: the ratio to what each goal compares with (above 1 is better; latency the other's over the row's); bold: missed.")
	fmt.Println()
	head, sep := "| goal | path | pods |", "| --- | --- | --- |"
	for _, m := range metrics {
		head += " " + m.name + " |"
		sep += " --- |"
	}
	fmt.Println(head)
	fmt.Println(sep)
	for _, l := range lines {
		fmt.Println(l)
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// writeJSON writes one line per row: the medians and every run.
func (r *report) writeJSON() error {
	if r.o.json == "" {
		return nil
	}
	f, err := os.OpenFile(r.o.json, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	var ferr error
	r.allRows(func(c config, pk string) {
		med := map[string]float64{}
		for _, m := range metrics {
			med[m.name], _ = r.value(c.name, pk, m)
		}
		line := map[string]any{"time": r.started.Format(time.RFC3339), "config": c.name, "path": rowTitle(c, pk), "pods": pk,
			"medians": med, "runs": r.samples[c.name][pk], "loads": r.loads[c.name]}
		if err := enc.Encode(line); err != nil && ferr == nil {
			ferr = err
		}
	})
	return ferr
}
