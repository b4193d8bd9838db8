// Command benchservices is `make bench-services`: the Services proxy's
// control plane beside the anchor's, kube-proxy v1.34.2 in nftables mode,
// in one run on one real control plane (test/kube/control-plane.sh) with
// N ClusterIP Services of one TCP port, each with an EndpointSlice of four
// ready endpoints (API objects only: no pods, no kubelet), for N = 1,000,
// 10,000 and 30,000 (-n).
//
// Each proxy runs alone on a fresh node namespace wired to the API
// server's namespace, with its metrics and health on that namespace's
// loopback. For each N and proxy it reports:
//
//   - first sync: from the proxy's start to the kernel's map of ClusterIPs
//     holding all N Services (kube-proxy: ip table kube-proxy, map
//     service-ips; cnibox: inet tables cnibox-services-00.., map service-ips4),
//     read from nftables' netlink notifications in the node namespace and
//     checked with a dump of the map;
//   - one change: a Service and its EndpointSlice created, from the first
//     create to its ClusterIP's element in the map; -samples of them one at
//     a time, each once no transaction has been committed for -gap
//     (kube-proxy's default --min-sync-period), p50 and p99;
//   - the proxy's memory right after its first sync (VmRSS, and the Pss of
//     smaps_rollup).
//
// A proxy that cannot run here (cnibox-agent built without
// --service-proxy) is reported unavailable, with no numbers. The table
// is Markdown on stdout, then the goals and whether this run met
// them. It re-executes itself in a private network namespace: the control
// plane, the bridge and the node namespaces live there. Nothing in it
// asserts a timing.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/test/internal/privnet"
)

const privateEnv = "CNIBOX_BENCH_SERVICES_PRIVATE"

type options struct {
	sizes     []int
	sides     []string
	kubeProxy string
	agent     string
	agentArgs string
	kpArgs    string
	kcp       string
	samples   int
	sampleFor time.Duration
	minSample int
	gap       time.Duration
	workers   int
	clients   int
	timeout   time.Duration
	json      string
	quiet     bool
	pair      bool
	logs      string
}

func parseOptions(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench-services", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var sizes, sides string
	home, _ := os.UserHomeDir()
	fs.StringVar(&sizes, "n", "1000,10000,30000", "numbers of Services (x 4 endpoints), comma-separated, run in this order (Services are only added: sort them up)")
	fs.StringVar(&sides, "proxies", "kube-proxy,cnibox", "the proxies to run at each size, in this order: kube-proxy, cnibox")
	fs.StringVar(&o.kubeProxy, "kube-proxy", filepath.Join(home, ".cache/cnibox-kube/v1.34.2/kube-proxy"), "kube-proxy v1.34.2 (bash test/kube/control-plane.sh build kube-proxy)")
	fs.StringVar(&o.agent, "agent-kube", "bin/cnibox-agent-kube", "cnibox-agent-kube (make build)")
	fs.StringVar(&o.agentArgs, "agent-args", "", "more flags for the agent, space-separated")
	fs.StringVar(&o.kpArgs, "kube-proxy-args", "", "more flags for kube-proxy, space-separated")
	fs.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	fs.IntVar(&o.samples, "samples", 50, "Services created one at a time and timed, per size and proxy")
	fs.DurationVar(&o.sampleFor, "samples-time", 4*time.Minute, "stop timing changes of a row after this long, once -min-samples are timed (kube-proxy's sync takes seconds at 10,000 Services)")
	fs.IntVar(&o.minSample, "min-samples", 10, "changes timed in a row at least, whatever -samples-time says")
	fs.DurationVar(&o.gap, "gap", time.Second, "no transaction for this long before each timed change (kube-proxy's --min-sync-period)")
	fs.IntVar(&o.workers, "workers", 48, "API requests at once when creating the Services")
	fs.IntVar(&o.clients, "clients", 4, "API clients (connections, protobuf) creating the Services")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up waiting for a first sync or one change after this long")
	fs.StringVar(&o.json, "json", "", "also write one JSON line per row to this file")
	fs.BoolVar(&o.quiet, "q", false, "no progress on stderr")
	fs.StringVar(&o.logs, "logs", "", "keep each proxy's log in this directory (default: removed with the run's temporary directory)")
	fs.BoolVar(&o.pair, "pair", false, "time one change from its EndpointSlice's create, the Service created right after it (default: the slice first, then, once the proxy is quiet, the Service, timed alone)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.sizes, err = parseSizes(sizes); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(sides, ",") {
		switch s = strings.TrimSpace(s); s {
		case "kube-proxy", "cnibox":
			o.sides = append(o.sides, s)
		default:
			return nil, fmt.Errorf("-proxies: %q is no proxy (kube-proxy, cnibox)", s)
		}
	}
	if o.samples < 0 || o.workers < 1 || o.clients < 1 {
		return nil, fmt.Errorf("-samples must be >= 0, -workers and -clients >= 1")
	}
	return o, nil
}

// parseSizes reads -n: positive, increasing (the Services of one size are
// kept for the next), at most maxServices.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		if err != nil || n < 1 || n > maxServices {
			return nil, fmt.Errorf("-n: %q is no number of Services (1 to %d)", f, maxServices)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-n: %d after %d: give the sizes in increasing order", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

func (o *options) logf(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "%s bench-services: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// proxies are the sides to run, in -proxies order.
func (o *options) proxies() []proxy {
	var ps []proxy
	for _, s := range o.sides {
		switch s {
		case "kube-proxy":
			ps = append(ps, kubeProxy{bin: o.kubeProxy, extra: strings.Fields(o.kpArgs)})
		case "cnibox":
			ps = append(ps, cniboxProxy{bin: o.agent, extra: strings.Fields(o.agentArgs)})
		}
	}
	return ps
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(os.Stderr, "bench-services:", err)
		}
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-services: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	os.Exit(privnet.Reexec("bench-services", privateEnv+"=1"))
}

func runPrivate(o *options) int {
	log.SetOutput(io.Discard)
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-services: loopback up:", err)
		return 1
	}
	c, err := newCluster(o)
	if c != nil {
		defer c.close()
		// make's Ctrl-C or a SIGTERM (passed on by the parent) stops the
		// proxy and the control plane rather than leaving them running.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-sig
			fmt.Fprintf(os.Stderr, "bench-services: %v: stopping\n", s)
			c.close()
			os.Exit(1)
		}()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-services:", err)
		return 1
	}
	var rs []*result
	code := 0
	for _, n := range o.sizes {
		d, err := c.grow(n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-services: create %d Services: %v\n", n, err)
			code = 1
			break
		}
		o.logf("%d Services x %d endpoints in the API (%.1f s to create them, %.0f objects/s)", n, endpointsPer, d.Seconds(), float64(2*(n-prev(o.sizes, n)))/d.Seconds())
		for _, p := range o.proxies() {
			r := c.runSide(p)
			if r.Err != "" {
				code = 1
			}
			rs = append(rs, r)
		}
	}
	fmt.Printf("\nbench-services: ClusterIP Services of one TCP port x %d ready endpoints (EndpointSlices, no pods); one change = a Service and its EndpointSlice created, %d timed per row, each after %s without a transaction\n\n",
		endpointsPer, o.samples, o.gap)
	writeTable(os.Stdout, rs)
	fmt.Println()
	writeGoals(os.Stdout, goals(rs))
	if o.json != "" {
		if err := appendJSON(o.json, rs); err != nil {
			fmt.Fprintln(os.Stderr, "bench-services:", err)
			code = 1
		}
	}
	return code
}

// prev is the size before n in sizes (0 for the first).
func prev(sizes []int, n int) int {
	i := slices.Index(sizes, n)
	if i <= 0 {
		return 0
	}
	return sizes[i-1]
}

func appendJSON(path string, rs []*result) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeJSON(f, rs)
}
