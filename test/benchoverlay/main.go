// Command benchoverlay is `make bench-overlay`: N simulated nodes (a network
// namespace each, a veth onto one bridge, one cnibox-agent each, all started
// together) join one etcd. It reports the time from the last agent start
// until every node has every peer programmed (route, permanent neighbour, FDB
// entry; checked in full afterwards), how many agents exited, how long one
// node's removal takes to reach all others, the agents' RSS and CPU, and TCP
// throughput pod to pod across the overlay next to the same path without it.
//
// It re-executes itself in a private network namespace, which holds the
// underlay bridge and etcd, so nothing touches the machine's network.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cnibox/cnibox/test/internal/privnet"
)

const privateEnv = "CNIBOX_BENCH_OVERLAY_PRIVATE"

type options struct {
	nodes     []int
	iperfSecs int
	agent     string
	cnibox    string
	timeout   time.Duration
	json      string
	verbose   bool
	// backends limits the throughput rows to these backend types or row
	// names (none: all).
	backends []string
}

func parseOptions() (*options, error) {
	o := &options{}
	var nodes string
	flag.StringVar(&nodes, "n", envStr("N", "10,100,200"), "node counts to run (env N)")
	flag.IntVar(&o.iperfSecs, "iperf", 5, "seconds per iperf3 run; 0 skips the throughput rows")
	flag.StringVar(&o.agent, "agent", "bin/cnibox-agent", "the cnibox-agent binary")
	flag.StringVar(&o.cnibox, "bin", envStr("CNIBOX_BIN", "bin/cnibox"), "the cnibox binary (env CNIBOX_BIN)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up waiting for a convergence after this long")
	flag.StringVar(&o.json, "json", "", "also write one JSON line per row to this file")
	flag.BoolVar(&o.verbose, "v", false, "log progress")
	var backends string
	flag.StringVar(&backends, "backends", "", "throughput rows of only these backend types, comma separated (vxlan, host-gw, wireguard, ipip; default all; a backend this kernel lacks is skipped)")
	flag.Parse()
	for _, b := range strings.Split(backends, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.backends = append(o.backends, b)
		}
	}
	for _, s := range strings.Split(nodes, ",") {
		if strings.TrimSpace(s) == "0" {
			continue // throughput rows only
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 || n > 250 {
			return nil, fmt.Errorf("-n %q: want node counts between 2 and 250", nodes)
		}
		o.nodes = append(o.nodes, n)
	}
	return o, nil
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-overlay:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-overlay: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	for _, b := range []string{o.agent, o.cnibox} {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "bench-overlay: %v (run make build)\n", err)
			os.Exit(2)
		}
	}
	for _, tool := range []string{"etcd", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil && (tool == "etcd" || o.iperfSecs > 0) {
			fmt.Fprintf(os.Stderr, "bench-overlay: %s is not installed (apt-get install etcd-server iperf3)\n", tool)
			os.Exit(2)
		}
	}
	os.Exit(privnet.Reexec("bench-overlay", privateEnv+"=1"))
}

func runPrivate(o *options) int {
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-overlay: loopback up:", err)
		return 1
	}
	r := newReport(o)
	for _, n := range o.nodes {
		row, err := scaleRun(o, n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-overlay: N=%d: %v\n", n, err)
			return 1
		}
		r.scale(row)
	}
	if o.iperfSecs > 0 {
		rows, err := throughputRun(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-overlay: throughput:", err)
			return 1
		}
		r.throughput(rows)
	}
	return r.flush()
}
