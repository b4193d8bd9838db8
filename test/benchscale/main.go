// Command benchscale is `make bench-scale`: one real cnibox-agent among N
// simulated nodes (N=1000,5000), for the etcd backend (N leases written
// straight into etcd in flannel's layout) and the Kubernetes backend (N
// realistic Node objects in a real control plane: 25 images, conditions,
// flannel's annotations, a podCIDR). It reports the time from the agent's
// start until the kernel holds every peer's route, neighbour and FDB entry
// (then checks that the kernel holds exactly the N peers), the agent's
// resident set and its peak, how long a removed peer takes to leave the
// kernel, and for the kube backend the bytes and CPU one unrelated node
// status update costs the agent, with the bytes the API server would send
// for the same update over other kinds of watch. With FLANNELD=path, the
// same runs for flanneld, which takes the same flags.
//
// It re-executes itself in a private network namespace: etcd, the control
// plane, the agent and its VXLAN device all live there.
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

const privateEnv = "CNIBOX_BENCH_SCALE_PRIVATE"

type options struct {
	nodes     []int
	backends  []string
	types     []string // overlay backend types (vxlan, host-gw, wireguard); etcd only but vxlan
	agent     string   // etcd backend
	agentKube string   // kube backend
	flanneld  string
	kcp       string // test/kube/control-plane.sh
	updates   int
	pods      int // kube: pods as API objects (with policies: the policy rows)
	policies  int // kube: NetworkPolicies
	timeout   time.Duration
	settle    time.Duration // steady running before RSS is read
	json      string
	verbose   bool
}

func parseOptions() (*options, error) {
	o := &options{}
	var nodes, backends, types string
	flag.StringVar(&nodes, "n", envStr("N", "1000,5000"), "simulated node counts (env N)")
	flag.StringVar(&backends, "backends", envStr("BACKENDS", "etcd,kube"), "backends to run (env BACKENDS)")
	flag.StringVar(&types, "types", envStr("TYPES", "vxlan"), "overlay backend types to run on etcd: vxlan, host-gw, wireguard (env TYPES; kube runs vxlan)")
	flag.StringVar(&o.agent, "agent", "bin/cnibox-agent", "cnibox-agent (etcd backend)")
	flag.StringVar(&o.agentKube, "agent-kube", "bin/cnibox-agent-kube", "cnibox-agent-kube (kube backend)")
	flag.StringVar(&o.flanneld, "flanneld", os.Getenv("FLANNELD"), "a flanneld binary to run side by side (env FLANNELD)")
	flag.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	var peerKind string
	flag.StringVar(&peerKind, "peers", envStr("PEERS", "cnibox"), "kube: the simulated nodes are published by cnibox (label and pod-cidrs annotation too) or flannel (env PEERS)")
	flag.IntVar(&o.pods, "pods", 0, "kube: also write this many pods (Running, spread over the nodes) and run the agent with --network-policy=false and on (issue 41's policy rows)")
	flag.IntVar(&o.policies, "policies", 0, "kube: NetworkPolicies to write with -pods")
	flag.IntVar(&o.updates, "updates", 500, "unrelated node status updates to average over (kube)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for a convergence after this long")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "let the agent run this long after the last step before its RSS is read (its periodic work: three rules resyncs at 5 s)")
	flag.StringVar(&o.json, "json", "", "also write one JSON line per row to this file")
	flag.BoolVar(&o.verbose, "v", false, "log progress")
	flag.Parse()
	if peerKind != "cnibox" && peerKind != "flannel" {
		return nil, fmt.Errorf("-peers %q: want cnibox or flannel", peerKind)
	}
	flannelPeers = peerKind == "flannel"
	for _, s := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 60000 {
			return nil, fmt.Errorf("-n %q: want node counts between 1 and 60000", nodes)
		}
		o.nodes = append(o.nodes, n)
	}
	if o.pods < 0 || o.policies < 0 || (o.policies > 0 && o.pods == 0) {
		return nil, fmt.Errorf("-pods %d -policies %d: policies need pods", o.pods, o.policies)
	}
	for _, b := range strings.Split(backends, ",") {
		if b = strings.TrimSpace(b); b != "etcd" && b != "kube" {
			return nil, fmt.Errorf("-backends %q: want etcd and/or kube", backends)
		}
		o.backends = append(o.backends, strings.TrimSpace(b))
	}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != typeVXLAN && t != typeHostGW && t != typeWireGuard {
			return nil, fmt.Errorf("-types %q: want vxlan, host-gw and/or wireguard", types)
		}
		o.types = append(o.types, t)
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
		fmt.Fprintf(os.Stderr, "%s bench-scale: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
}

func main() {
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-scale: must run as root (it creates a network namespace)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	for _, b := range []string{o.agent, o.agentKube} {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: %v (run make build)\n", err)
			os.Exit(2)
		}
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale: etcd is not installed (apt-get install etcd-server)")
		os.Exit(2)
	}
	os.Exit(privnet.Reexec("bench-scale", privateEnv+"=1"))
}

// agentSide is one agent binary of a run and its extra flags.
type agentSide struct {
	name, bin string
	args      []string
	policy    bool // kube: NetworkPolicy on, and its table's sync waited for
}

func runPrivate(o *options) int {
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale: loopback up:", err)
		return 1
	}
	var rows []row
	code := 0
	for _, backend := range o.backends {
		sides := []agentSide{{name: "cnibox-agent", bin: o.agent}}
		if backend == "kube" {
			sides[0] = agentSide{name: "cnibox-agent-kube", bin: o.agentKube}
			if o.pods > 0 {
				sides = policySides(o.agentKube)
			}
		}
		if o.flanneld != "" {
			sides = append(sides, agentSide{name: "flanneld", bin: o.flanneld})
		}
		types := o.types
		if backend == "kube" {
			types = []string{typeVXLAN}
		}
		for _, typ := range types {
			if err := kernelHas(typ); err != nil {
				fmt.Fprintf(os.Stderr, "bench-scale: %s %s: skipped, this kernel lacks it (%v)\n", backend, typ, err)
				continue
			}
			for _, n := range o.nodes {
				// A policy run's two agents share one control plane.
				groups := [][]agentSide{}
				for i, s := range sides {
					if i > 0 && o.pods > 0 && backend == "kube" && s.bin == sides[0].bin {
						groups[0] = append(groups[0], s)
						continue
					}
					groups = append(groups, []agentSide{s})
				}
				for _, g := range groups {
					var rs []row
					var err error
					if backend == "etcd" {
						var r row
						r, err = etcdRun(o, g[0].bin, n, typ)
						if err == nil {
							rs = []row{r}
						}
					} else {
						rs, err = kubeRun(o, g, n)
					}
					if err != nil {
						fmt.Fprintf(os.Stderr, "bench-scale: %s %s %s N=%d: %v\n", backend, typ, g[0].name, n, err)
						code = 1
					}
					for i, r := range rs {
						r.Backend, r.Type, r.Agent, r.Nodes = backend, typ, g[i].name, n
						if r.Mismatches > 0 {
							code = 1
						}
						r.print()
						rows = append(rows, r)
					}
				}
			}
		}
	}
	if err := writeJSON(o, rows); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		code = 1
	}
	return code
}
