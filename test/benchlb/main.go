// Command benchlb is `make bench-lb`'s allocation part: the LoadBalancer
// IPAM (agent/lbipam) of the real agent, cnibox-agent-kube --lb-ipam, as
// the elected controller on a real control plane
// (test/kube/control-plane.sh), timed at -n Services of type LoadBalancer
// (default 1,000):
//
//   - a backlog: -n Services created with no agent running, then the
//     agent started: from its start to the last one's ingress (the
//     allocator's own pace: one list, one plan, -n status writes);
//   - all at once: -n more created -workers at a time, from the first
//     create to the last one's status.loadBalancer.ingress set, and each
//     Service's own time from its create to its ingress (p50, p99);
//   - one at a time: with the 2 x -n there, -samples more created one by one,
//     each from its create to its ingress (p50, p99);
//   - the allocator's failover: a second agent waits; the leading one is
//     SIGKILLed (it gives nothing up) and a Service created at once, timed
//     to its ingress, -kills times, the agents taking turns (the Lease
//     lasts three renewals: 6 s at --lb-ipam-renew's default 2 s).
//
// Each Service's times are read from a watch of the Services: the first
// event that shows its ingress. The leader's CPU time and its status
// writes (its /metrics) are reported beside. Each agent runs in a node
// namespace of its own wired to the API server's by a bridge, with the
// overlay on the Kubernetes subnet manager (vxlan) as a node runs it.
// The table is Markdown on stdout. It re-executes itself in a private
// network namespace; nothing in it asserts a timing. The announcers'
// failover is TestKubeLBAnnounce's (make bench-lb runs it after this).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/test/internal/privnet"
)

const privateEnv = "CNIBOX_BENCH_LB_PRIVATE"

type options struct {
	n         int
	samples   int
	kills     int
	workers   int
	agent     string
	agentArgs string
	kcp       string
	crd       string
	logs      string
	timeout   time.Duration
	quiet     bool
}

func parseOptions(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench-lb", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.IntVar(&o.n, "n", 1000, "Services of type LoadBalancer created at once")
	fs.IntVar(&o.samples, "samples", 50, "Services then created one at a time and timed")
	fs.IntVar(&o.kills, "kills", 5, "times the leading agent is SIGKILLed and a Service created at once (0: one agent, no failover)")
	fs.IntVar(&o.workers, "workers", 16, "API requests at once when creating the Services")
	fs.StringVar(&o.agent, "agent-kube", "bin/cnibox-agent-kube", "cnibox-agent-kube (make build)")
	fs.StringVar(&o.agentArgs, "agent-args", "", "more flags for the agents, space-separated")
	fs.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	fs.StringVar(&o.crd, "crd", "deploy/kubernetes/loadbalancerippool-crd.yaml", "the LoadBalancerIPPool CRD")
	fs.StringVar(&o.logs, "logs", "", "keep the agents' logs in this directory (default: removed with the run's temporary directory)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up waiting for an allocation after this long")
	fs.BoolVar(&o.quiet, "q", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case o.n < 1 || o.n > maxServices:
		return nil, fmt.Errorf("-n %d: give 1 to %d Services", o.n, maxServices)
	case o.samples < 0 || o.kills < 0 || o.samples+o.kills > maxSamples:
		return nil, fmt.Errorf("-samples %d, -kills %d: give 0 or more, %d in all at most", o.samples, o.kills, maxSamples)
	case o.workers < 1:
		return nil, fmt.Errorf("-workers %d: give at least 1", o.workers)
	}
	for _, p := range []*string{&o.agent, &o.kcp, &o.crd} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	return o, nil
}

func (o *options) logf(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(os.Stderr, "%s bench-lb: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(os.Stderr, "bench-lb:", err)
		}
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-lb: must run as root (it creates network namespaces)")
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "1" {
		os.Exit(runPrivate(o))
	}
	os.Exit(privnet.Reexec("bench-lb", privateEnv+"=1"))
}

func runPrivate(o *options) int {
	log.SetOutput(io.Discard)
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb: loopback up:", err)
		return 1
	}
	c, err := newCluster(o)
	if c != nil {
		defer c.close()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-sig
			fmt.Fprintf(os.Stderr, "bench-lb: %v: stopping\n", s)
			c.close()
			os.Exit(1)
		}()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		return 1
	}
	r, err := c.run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
	}
	fmt.Printf("\nbench-lb: Services of type LoadBalancer (one TCP port, no NodePorts), one pool; the allocator cnibox-agent-kube --lb-ipam (--lb-ipam-renew 2s)\n\n")
	r.write(os.Stdout)
	if err != nil {
		return 1
	}
	return 0
}
