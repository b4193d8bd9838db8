package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// cnibox writes one JSON record per call to its log file ($CNIBOX_LOG_FILE):
// the in-process time ("took", from the adapter's start to the record) and
// the role's timed steps. The bench points every batch of ours at a log
// file of its own, so that the report can say where the time of one call
// goes: the libcni wall time minus the in-process time is exec, Go runtime
// start-up and exit.

// logEnv is cnibox's log file variable.
const logEnv = "CNIBOX_LOG_FILE"

// useLog points cnibox's log at the file of one (case, mode), unless the
// user set CNIBOX_LOG_FILE (e.g. "off" to measure without logging).
func (b *bench) useLog(group, mode string) {
	if b.userLog {
		return
	}
	os.Setenv(logEnv, b.logPath(group, mode))
}

func (b *bench) logPath(group, mode string) string {
	name := strings.NewReplacer("+", "_", "=", "", " ", "_", "/", "_").Replace(group + "-" + mode)
	return filepath.Join(b.tmp, "logs", name+".log")
}

// callRecord is the part of a log record the breakdown reads.
type callRecord struct {
	Role    string           `json:"role"`
	Command string           `json:"command"`
	Took    int64            `json:"took"`
	Steps   map[string]int64 `json:"steps"`
	Level   string           `json:"level"`
}

// roleTimes are the in-process times of one role and command.
type roleTimes struct {
	took  []time.Duration
	steps map[string][]time.Duration
}

// readLog reads a log file into per "role command" times.
func readLog(path string) (map[string]*roleTimes, []string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	out := map[string]*roleTimes{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r callRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Role == "" || r.Command == "VERSION" {
			continue
		}
		k := r.Role + " " + r.Command
		t := out[k]
		if t == nil {
			t = &roleTimes{steps: map[string][]time.Duration{}}
			out[k] = t
			order = append(order, k)
		}
		t.took = append(t.took, time.Duration(r.Took))
		for s, d := range r.Steps {
			t.steps[s] = append(t.steps[s], time.Duration(d))
		}
	}
	return out, order
}

// breakdownRows are the report's rows for ours: per case and mode, the
// libcni p50 of each verb next to the in-process p50 of each role it ran.
func (b *bench) breakdownRows() []row {
	if b.userLog {
		return nil
	}
	var rows []row
	for _, c := range b.cases {
		// Sequential only: medians of concurrent calls do not add up.
		for _, conc := range []int{1} {
			mode := modeName(conc)
			times, order := readLog(b.logPath(c.name, mode))
			if len(times) == 0 {
				continue
			}
			for _, op := range []string{opAdd, opCheck, opDel} {
				o := summarise(b.lookup(c.name, mode, op, "ours"))
				if o == nil {
					continue
				}
				var sum time.Duration
				var parts []string
				for _, k := range order {
					if !strings.HasSuffix(k, " "+op) {
						continue
					}
					t := times[k]
					m := median(t.took)
					sum += m
					p := fmt.Sprintf("%s %s", strings.TrimSuffix(k, " "+op), fmtMs(ms(m)))
					var steps []string
					names := make([]string, 0, len(t.steps))
					for s := range t.steps {
						names = append(names, s)
					}
					sort.Strings(names)
					for _, s := range names {
						steps = append(steps, fmt.Sprintf("%s %s", s, fmtMs(ms(median(t.steps[s])))))
					}
					if len(steps) > 0 {
						p += " (" + strings.Join(steps, ", ") + ")"
					}
					parts = append(parts, p)
				}
				rows = append(rows, row{c.name, mode, op, fmtMs(o.P50), fmtMs(ms(sum)), fmtMs(o.P50 - ms(sum)), strings.Join(parts, "; ")})
			}
		}
	}
	return rows
}
