// Command bench is `make bench`: it drives the cnibox plugins and a
// reference plugin set (Debian's containernetworking-plugins in /usr/lib/cni,
// or upstream's newest release with REF=upstream) through libcni exactly as
// containerd does, interleaving whole batches of pods (ours, reference, ours,
// ...), checks that every run is correct (no duplicate addresses, nothing left
// after DEL), and prints a side-by-side table with ratios plus one JSON line
// per row.
//
// It re-executes itself in a private network namespace that stands for the
// node, so bridges, veths, iptables and nftables rules never touch the
// machine's own; pod namespaces are created (untimed) under /run/netns and
// removed again, and every file it writes lives in a temp dir.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/test/internal/privnet"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

// privateEnv marks the re-executed process that runs in the private node
// namespace; refDirEnv and nopEnv hand it what the parent prepared (the
// private namespace has no network to download or build with).
const (
	privateEnv = "CNIBOX_BENCH_PRIVATE"
	refDirEnv  = "CNIBOX_BENCH_REF_DIR"
	refNameEnv = "CNIBOX_BENCH_REF_NAME"
	nopEnv     = "CNIBOX_BENCH_NOP"
	rssEnv     = "CNIBOX_BENCH_RSSWRAP"
	vethdelEnv = "CNIBOX_BENCH_VETHDEL"
	nopcniEnv  = "CNIBOX_BENCH_NOPCNI"

	debianRefDir = "/usr/lib/cni"
)

// options are the bench's knobs (flags, some with an environment default).
type options struct {
	n         int   // pods per batch
	rounds    int   // batches per side per case and mode
	conc      []int // concurrency levels; 1 = sequential
	cases     map[string]bool
	ref       string        // "debian", "upstream" or a plugin directory
	scale     []int         // existing reservations for the host-local scale rows
	scaleReps int           // timed ADD/DEL pairs per side and size
	execRuns  int           // VERSION execs per binary and side
	rssRuns   int           // directly exec'd ADDs per side for peak RSS
	floorN    int           // veth create/delete pairs for the floor rows
	settle    time.Duration // pause after each batch's namespaces are deleted
	bin       string        // the cnibox binary
	jsonPath  string        // JSON lines go here ("" = stdout)
	verbose   bool
}

var allCases = []string{"bridge", "chain", "ptp", "macvlan", "podman", "scale", "floor", "exec", "azure"}

func parseOptions() (*options, error) {
	o := &options{}
	var conc, cases, scale string
	flag.IntVar(&o.n, "n", envInt("N", 200), "pods per batch (env N)")
	flag.IntVar(&o.rounds, "rounds", envInt("ROUNDS", 3), "batches per side for each case and concurrency, interleaved ours/ref (env ROUNDS)")
	flag.StringVar(&conc, "c", envStr("CONC", "1,8,32"), "concurrency levels, 1 = sequential (env CONC)")
	flag.StringVar(&cases, "cases", envStr("CASES", strings.Join(allCases, ",")), "what to run: "+strings.Join(allCases, ",")+" (env CASES)")
	flag.StringVar(&o.ref, "ref", envStr("REF", "debian"), "reference plugins: debian (/usr/lib/cni), upstream (built "+upstream.Version+") or a directory (env REF)")
	flag.StringVar(&scale, "scale", "1000,5000,20000", "existing reservations for the host-local rows (0 is always added)")
	flag.IntVar(&o.scaleReps, "scale-reps", 21, "timed host-local ADD/DEL pairs per side and size")
	flag.IntVar(&o.execRuns, "exec-runs", 0, "VERSION execs per binary and side (default: n)")
	flag.IntVar(&o.rssRuns, "rss-runs", 5, "directly exec'd ADDs per side for peak RSS")
	flag.IntVar(&o.floorN, "floor-n", 0, "veth create/delete pairs for the floor rows (default: n)")
	flag.DurationVar(&o.settle, "settle", 300*time.Millisecond, "pause after a batch's pod namespaces are deleted")
	flag.StringVar(&o.bin, "bin", envStr("CNIBOX_BIN", "bin/cnibox"), "the cnibox binary (env CNIBOX_BIN)")
	flag.StringVar(&o.jsonPath, "json", "", "write the JSON lines to this file instead of stdout")
	flag.BoolVar(&o.verbose, "v", false, "print every batch's progress")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if o.conc, err = intList("-c", conc); err != nil {
		return nil, err
	}
	if o.scale, err = intList("-scale", scale); err != nil {
		return nil, err
	}
	o.cases = map[string]bool{}
	for _, c := range strings.Split(cases, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if c == "all" {
			for _, a := range allCases {
				o.cases[a] = true
			}
			continue
		}
		if !contains(allCases, c) {
			return nil, fmt.Errorf("-cases: unknown case %q (known: %s)", c, strings.Join(allCases, ","))
		}
		o.cases[c] = true
	}
	if o.n < 1 || o.rounds < 1 || o.scaleReps < 1 || o.rssRuns < 1 {
		return nil, errors.New("-n, -rounds, -scale-reps and -rss-runs must be at least 1")
	}
	if o.execRuns <= 0 {
		o.execRuns = o.n
	}
	if o.floorN <= 0 {
		o.floorN = o.n
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return nil, err
	}
	return o, nil
}

func main() {
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	os.Exit(runParent(o))
}

// runParent prepares what needs the machine's network (the reference
// plugins, the floor binary) and re-executes the bench in a fresh network
// namespace standing for the node.
func runParent(o *options) int {
	if _, err := os.Stat(o.bin); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cnibox binary: %v (run make build, or give -bin)\n", err)
		return 2
	}
	refDir, refName, err := prepareRef(o.ref)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: reference plugins:", err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "cnibox-bench-helpers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	hs, err := buildHelpers(tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: build the helper binaries (exec and DEL floors, RSS wrapper):", err)
	}
	return privnet.Reexec("bench", privateEnv+"=1", refDirEnv+"="+refDir, refNameEnv+"="+refName, nopEnv+"="+hs.nop, rssEnv+"="+hs.rsswrap, vethdelEnv+"="+hs.vethdel, nopcniEnv+"="+hs.nopcni)
}

// runPrivate is the bench proper, inside the private node namespace.
func runPrivate(o *options) int {
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: loopback up in the private namespace:", err)
		return 1
	}
	b, err := newBench(o, os.Getenv(refDirEnv), os.Getenv(refNameEnv), helpers{nop: os.Getenv(nopEnv), rsswrap: os.Getenv(rssEnv), vethdel: os.Getenv(vethdelEnv), nopcni: os.Getenv(nopcniEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: stopping after the current call, cleaning up\n", s)
		b.stop()
	}()
	code := b.run()
	if err := b.close(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		code = 1
	}
	return code
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if v := os.Getenv(k); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func intList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: %q is not a non-negative integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
