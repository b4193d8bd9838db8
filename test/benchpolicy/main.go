// Command benchpolicy is `make bench-policy`: the NetworkPolicy engine's
// speed beside the anchor's, kube-router v2.1.0's policy controller, in one
// run on one real control plane (test/kube/control-plane.sh) with the
// cluster's pods and policies as API objects.
//
// Each side gets three node namespaces on one underlay bridge, each running
// its agent (cnibox-agent-kube --kube-subnet-mgr, or kube-router
// --run-firewall with its router and proxy off) against the API server.
// It reports:
//
//   - programming latency: from a pod's status turning Running with its
//     address (or a NetworkPolicy's create) to the transaction that carries
//     it in the kernel of every node (nftables' netlink notifications in
//     each node namespace; for kube-router its iptables-nft commit, with the
//     pod's address checked in its ipsets), p50/p99/max;
//   - per-packet cost: a Go TCP request/response loop (one byte each way on
//     one connection) between two pods (network namespaces with veths on
//     node 0's bridge, br_netfilter on) with no agent, with the agent and no
//     policy selecting them, and with 200 NetworkPolicies selecting both;
//   - each agent's resident set at the end.
//
// It re-executes itself in a private network namespace: the control plane,
// the bridge and the nodes live there. Nothing in it asserts a timing.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"time"

	"github.com/cnibox/cnibox/test/internal/kuberouter"
	"github.com/cnibox/cnibox/test/internal/privnet"
)

const privateEnv = "CNIBOX_BENCH_POLICY_PRIVATE"

type options struct {
	agent      string
	kubeRouter string
	kcp        string
	nodes      int
	namespaces int
	pods       int
	policies   int
	samples    int
	polSamples int
	rrPolicies int
	rrDuration time.Duration
	rrRuns     int
	floodRate  int
	timeout    time.Duration
	json       string
	verbose    bool
	skipCnibox bool
	flowLog    bool
}

func parseOptions() *options {
	o := &options{}
	flag.StringVar(&o.agent, "agent-kube", "bin/cnibox-agent-kube", "cnibox-agent-kube")
	flag.StringVar(&o.kubeRouter, "kube-router", "", "kube-router "+kuberouter.Version+" to run side by side (default: test/internal/kuberouter's build, made once; none: cnibox only)")
	flag.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	flag.IntVar(&o.nodes, "nodes", 3, "node namespaces per side")
	flag.IntVar(&o.namespaces, "namespaces", 10, "namespaces the pods and policies are spread over")
	flag.IntVar(&o.pods, "pods", 1000, "pods (API objects, Running, spread over the nodes)")
	flag.IntVar(&o.policies, "policies", 200, "NetworkPolicies (spread over the namespaces)")
	flag.IntVar(&o.samples, "samples", 100, "pods turned Running one at a time, each timed to every node")
	flag.IntVar(&o.polSamples, "policy-samples", 50, "NetworkPolicies created one at a time, each timed to every node")
	flag.IntVar(&o.rrPolicies, "rr-policies", 200, "NetworkPolicies selecting the two request/response pods")
	flag.DurationVar(&o.rrDuration, "rr-time", 5*time.Second, "length of one request/response run")
	flag.IntVar(&o.rrRuns, "rr-runs", 3, "request/response runs per case (the median is reported)")
	flag.IntVar(&o.floodRate, "flood-rate", 8000, "the flow log side: new connections a second to each of an allowed and a refused port (SYNs only), for -rr-time")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up waiting for one sample after this long")
	flag.StringVar(&o.json, "json", "", "also write one JSON line per row to this file")
	flag.BoolVar(&o.verbose, "v", false, "log progress")
	flag.BoolVar(&o.skipCnibox, "skip-cnibox", false, "run the anchor only")
	flag.BoolVar(&o.flowLog, "flow-log", true, "also run cnibox with the flow log on for every connection (an agent before it has no --flow-log: false)")
	flag.Parse()
	return o
}

func (o *options) logf(format string, args ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s bench-policy: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

func main() {
	o := parseOptions()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-policy: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	switch o.kubeRouter {
	case "none":
		o.kubeRouter = ""
	case "":
		// Built before the private namespace, which has no way out; the
		// child finds it in the environment.
		b, err := kuberouter.Binary()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-policy:", err)
			os.Exit(1)
		}
		o.kubeRouter = b
		os.Setenv(kuberouter.BinaryEnv, b)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	bins := []string{o.agent}
	if o.kubeRouter != "" {
		bins = append(bins, o.kubeRouter)
	}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "bench-policy: %v (run make build)\n", err)
			os.Exit(2)
		}
	}
	if o.kubeRouter != "" {
		for _, p := range []string{"ipset", "iptables", "iptables-restore"} {
			if _, err := exec.LookPath(p); err != nil {
				fmt.Fprintf(os.Stderr, "bench-policy: kube-router needs %s (apt-get install ipset iptables)\n", p)
				os.Exit(2)
			}
		}
	}
	os.Exit(privnet.Reexec("bench-policy", privateEnv+"=1"))
}

func runPrivate(o *options) int {
	// vishvananda/netlink's ipset reader logs every attribute it does not
	// know (kube-router's sets carry some) with the standard logger.
	log.SetOutput(io.Discard)
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-policy: loopback up:", err)
		return 1
	}
	c, err := newCluster(o)
	if c != nil {
		defer c.close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-policy:", err)
		return 1
	}
	var results []*result
	var sides []side
	if !o.skipCnibox {
		sides = append(sides, cniboxSide{bin: o.agent})
		if o.flowLog {
			sides = append(sides, cniboxSide{bin: o.agent, flowLog: true})
		}
	}
	if o.kubeRouter != "" {
		sides = append(sides, kubeRouterSide{o.kubeRouter})
	}
	code := 0
	for _, s := range sides {
		r, err := c.runSide(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-policy: %s: %v\n", s.name(), err)
			code = 1
		}
		if r != nil {
			results = append(results, r)
		}
	}
	printResults(o, results)
	if err := writeJSON(o, results); err != nil {
		fmt.Fprintln(os.Stderr, "bench-policy:", err)
		code = 1
	}
	return code
}
