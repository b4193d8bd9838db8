// Command benchdatapath is `make bench-datapath`: the data path pod to pod,
// side by side in one run, on the real-node harness's topology in network
// namespaces (two nodes on one underlay, a control plane on it, pods as
// namespaces on each node):
//
//   - the floor: two namespaces on a bare veth pair (what same-node pods
//     are compared with) and the two nodes over their plain underlay
//     (cross-node);
//   - flanneld v0.28.9 (test/internal/flanneld) with the reference plugins
//     v1.9.1 (test/internal/upstream: flannel's conflist, the flannel plugin
//     delegating to bridge and host-local, then portmap), on vxlan and
//     host-gw, as the conformance anchor runs them (--kube-subnet-mgr
//     --ip-masq);
//   - cnibox (cnibox-agent-kube --kube-subnet-mgr --ip-masq, NetworkPolicy
//     on as in its manifest, and cnibox's flannel and portmap roles with the
//     same conflist) on vxlan and host-gw;
//   - cnibox on vxlan and host-gw again with 200 NetworkPolicies selecting
//     the pods and the flow log on (deny) for their namespace;
//   - the policy anchor: flanneld + the reference plugins with kube-router
//     v2.1.0's policy controller on each node (test/internal/kuberouter;
//     --run-firewall with its router and service proxy off, as k3s runs it
//     beside flannel), the same 200 NetworkPolicies, on vxlan and host-gw;
//   - through a Service (services.go; issue 63 item 3): cnibox with its
//     Services proxy (the agent's --service-proxy), cnibox's overlay with
//     kube-proxy v1.34.2 in nftables mode on each node in place of it, and
//     flanneld + the reference plugins with kube-proxy, on vxlan and
//     host-gw: TCP_RR and TCP_CRR through a ClusterIP from a pod and
//     through a NodePort from a client off the cluster, to a pod on the
//     same node and to one across the overlay.
//
// For each pod-to-pod configuration, two pods on one node (same-node) and
// a pod on each node (cross-node): TCP throughput with iperf3 (1 and 4 streams), TCP_RR
// (one-byte transactions on one connection: latency p50/p99 and rate),
// TCP_CRR (connections a second) with test/internal/netload (netperf is not
// in Debian), and UDP packets a second at 64 bytes (iperf3 -u -b 0).
// Every configuration runs -rounds times, in turn, each measurement -runs
// times a round; the tables are medians of all of them. The load average
// before and after each configuration is printed beside it (the machine may
// be shared). Nothing in it asserts a timing.
//
// It re-executes itself in a private network namespace that holds the
// underlay bridge and the control plane; flanneld and the reference plugins
// are built (once, into the user's cache) before that, in the caller's
// namespace.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/test/internal/flanneld"
	"github.com/cnibox/cnibox/test/internal/kuberouter"
	"github.com/cnibox/cnibox/test/internal/privnet"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

const (
	privateEnv = "CNIBOX_BENCH_DATAPATH_PRIVATE"
	// serveEnv makes the program the netload server of a pod (started in
	// the pod's namespace): the ports to serve, comma separated.
	serveEnv = "CNIBOX_BENCH_DATAPATH_SERVE"
	// serveCPUEnv binds the server to a CPU (-pin).
	serveCPUEnv = "CNIBOX_BENCH_DATAPATH_SERVE_CPU"
)

// The CPUs of -pin: iperf3's UDP client on clientCPU and its server on
// serverCPU; TCP_RR's and TCP_CRR's client and server both on serverCPU.
// iperf3's TCP runs are left to the scheduler: bound, they lose most of
// their rate whenever other work lands on the CPU (the machine is shared),
// and four streams want both CPUs anyway.
const (
	clientCPU = 0
	serverCPU = 1
)

type options struct {
	agent  string
	cnibox string
	// kubeProxy is kube-proxy v1.34.2's binary (the kube-proxy
	// configurations).
	kubeProxy string
	kcp       string
	configs   []string
	rounds    int
	runs      int
	dur       time.Duration
	quick     bool
	policies  int
	udpSize   int
	timeout   time.Duration
	json      string
	verbose   bool
	pin       bool
	// ruleWalk is where each configuration's rule walk (rulewalk.go) is
	// written after it comes up ("": not traced).
	ruleWalk string
	// noMeasure sets the configurations up (and writes their path state
	// and rule walk) without measuring.
	noMeasure bool
	// pathState is where each configuration's path state (pathstate.go)
	// is written after it comes up ("": not written).
	pathState string
	// pairs, if set, are the only pair kinds measured (-pairs).
	pairs []string
	// perf is where a system-wide perf profile of each TCP_CRR run is
	// written ("": none; -perf).
	perf string
}

func parseOptions() (*options, error) {
	o := &options{}
	var configs string
	flag.StringVar(&o.agent, "agent-kube", "bin/cnibox-agent-kube", "cnibox-agent-kube (make build)")
	flag.StringVar(&o.cnibox, "bin", envStr("CNIBOX_BIN", "bin/cnibox"), "the cnibox binary (env CNIBOX_BIN)")
	flag.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	home, _ := os.UserHomeDir()
	flag.StringVar(&o.kubeProxy, "kube-proxy", filepath.Join(home, ".cache/cnibox-kube/v1.34.2/kube-proxy"), "kube-proxy v1.34.2 (bash test/kube/control-plane.sh build kube-proxy), for the configurations it serves the Services of")
	flag.StringVar(&configs, "configs", strings.Join(configNames(), ","), "configurations to run, comma separated; \"services\" stands for every configuration through a Service ("+strings.Join(serviceConfigs(), ", ")+"), \"pods\" for every other")
	flag.IntVar(&o.rounds, "rounds", 3, "times every configuration is set up and measured, in turn")
	flag.IntVar(&o.runs, "runs", 2, "runs of each measurement per round")
	flag.DurationVar(&o.dur, "time", 4*time.Second, "length of one run (iperf3: whole seconds)")
	flag.BoolVar(&o.quick, "quick", false, "a quick run for development: -rounds 1 -runs 1 -time 2s unless given")
	flag.IntVar(&o.policies, "policies", 200, "NetworkPolicies selecting the pods (the -policies and -kube-router configurations)")
	flag.IntVar(&o.udpSize, "udp-size", 64, "UDP payload in bytes")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up waiting for a configuration to come up after this long")
	flag.StringVar(&o.json, "json", "", "also write one JSON line per row to this file")
	flag.BoolVar(&o.verbose, "v", false, "log progress")
	flag.StringVar(&o.pathState, "path-state", "", "write every configuration's path state (links, offloads, vxlan and bridge settings, qdiscs, routes, nftables base chains, sysctls, per namespace) into this directory, one file per configuration set up")
	flag.StringVar(&o.ruleWalk, "rule-walk", "", "trace one connection of each pair with nftables' trace (nft monitor trace, in the node namespaces) once a configuration is up, and write the rules each packet was evaluated against, per node, into this directory (rulewalk.go)")
	flag.BoolVar(&o.noMeasure, "no-measure", false, "set each configuration up, write its -path-state and -rule-walk, and measure nothing")
	var pairs string
	flag.StringVar(&pairs, "pairs", "", "measure only these pairs, by the rows' names, separated by ';' (the names hold commas): "+strings.Join(pairKinds, "; "))
	flag.StringVar(&o.perf, "perf", "", "record a system-wide profile (perf record -a -g) of each TCP_CRR run into this directory, one file per configuration, pair, round and run (perf.go)")
	flag.BoolVar(&o.pin, "pin", runtime.NumCPU() >= 2, "bind TCP_RR's and TCP_CRR's client and server both to CPU 1, iperf3's UDP client to CPU 0 and its server to CPU 1 (unbound, where each side runs changes from run to run, and on a 2-vCPU VM a wake-up across vCPUs costs 20-30 µs: TCP_RR's p50 and UDP's rate come out bimodal)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["rounds"] {
			o.rounds = 1
		}
		if !set["runs"] {
			o.runs = 1
		}
		if !set["time"] {
			o.dur = 2 * time.Second
		}
	}
	for _, c := range strings.Split(configs, ",") {
		c = strings.TrimSpace(c)
		switch c {
		case "":
			continue
		case "services":
			o.configs = append(o.configs, serviceConfigs()...)
			continue
		case "pods":
			o.configs = append(o.configs, podConfigs()...)
			continue
		}
		if !slices.Contains(configNames(), c) {
			return nil, fmt.Errorf("-configs: no configuration %q (have %s)", c, strings.Join(configNames(), ", "))
		}
		o.configs = append(o.configs, c)
	}
	for _, p := range strings.Split(pairs, ";") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(pairKinds, p) {
			return nil, fmt.Errorf("-pairs: no pair %q (have %s)", p, strings.Join(pairKinds, "; "))
		}
		o.pairs = append(o.pairs, p)
	}
	if o.rounds < 1 || o.runs < 1 || o.dur < time.Second || o.policies < 1 {
		return nil, fmt.Errorf("-rounds, -runs and -policies want at least 1, -time at least 1s")
	}
	return o, nil
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (o *options) logf(format string, args ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s bench-datapath: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

func main() {
	if ports := os.Getenv(serveEnv); ports != "" {
		os.Exit(serve(ports))
	}
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-datapath:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-datapath: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		os.Exit(runPrivate(ctx, o))
	}
	for _, b := range []string{o.agent, o.cnibox, o.kcp} {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "bench-datapath: %v (run make build)\n", err)
			os.Exit(2)
		}
	}
	for _, tool := range []string{"etcd", "iperf3", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "bench-datapath: %s is not installed (apt-get install etcd-server iperf3 iptables)\n", tool)
			os.Exit(2)
		}
	}
	// Built before the private namespace, which has no way out; the child
	// finds them in its environment.
	if needsAnchor(o.configs) {
		fdir, err := flanneld.Dir()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-datapath: flanneld:", err)
			os.Exit(1)
		}
		pdir, err := upstream.Plugins(refPlugins...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-datapath: the reference plugins:", err)
			os.Exit(1)
		}
		os.Setenv(flanneld.DirEnv, fdir)
		os.Setenv(upstream.DirEnv, pdir)
	}
	if needsKubeProxy(o.configs) {
		if _, err := os.Stat(o.kubeProxy); err != nil {
			fmt.Fprintf(os.Stderr, "bench-datapath: kube-proxy: %v (bash test/kube/control-plane.sh build kube-proxy)\n", err)
			os.Exit(2)
		}
		if _, err := exec.LookPath("nft"); err != nil {
			fmt.Fprintln(os.Stderr, "bench-datapath: kube-proxy's nftables mode execs nft, which is not installed (apt-get install nftables)")
			os.Exit(2)
		}
	}
	if needsKubeRouter(o.configs) {
		for _, tool := range []string{"ipset", "iptables-restore", "iptables-save"} {
			if _, err := exec.LookPath(tool); err != nil {
				fmt.Fprintf(os.Stderr, "bench-datapath: kube-router needs %s (apt-get install ipset iptables)\n", tool)
				os.Exit(2)
			}
		}
		b, err := kuberouter.Binary()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-datapath: kube-router:", err)
			os.Exit(1)
		}
		os.Setenv(kuberouter.BinaryEnv, b)
	}
	os.Exit(privnet.Reexec("bench-datapath", privateEnv+"=1"))
}

func runPrivate(ctx context.Context, o *options) int {
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-datapath: loopback up:", err)
		return 1
	}
	start := time.Now()
	r := newReport(o)
	e, err := newEnv(ctx, o)
	if e != nil {
		defer e.close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-datapath:", err)
		return 1
	}
	r.loadStart = loadavg()
	for round := 1; round <= o.rounds; round++ {
		for _, name := range o.configs {
			c := configByName(name)
			before := loadavg()
			o.logf("round %d: %s (load %s)", round, c.name, before)
			res, err := e.run(c)
			r.add(c, round, before, loadavg(), res)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench-datapath: round %d, %s: %v\n", round, c.name, err)
				r.print(time.Since(start))
				return 1
			}
		}
	}
	r.print(time.Since(start))
	if err := r.writeJSON(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-datapath:", err)
		return 1
	}
	return 0
}

// loadavg is /proc/loadavg's three load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
