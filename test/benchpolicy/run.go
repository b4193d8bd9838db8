package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/test/internal/benchnode"
	"github.com/cnibox/cnibox/test/internal/policyload"
)

// result is one side's row.
type result struct {
	Side       string  `json:"side"`
	Nodes      int     `json:"nodes"`
	Pods       int     `json:"pods"`
	Policies   int     `json:"policies"`
	SyncS      float64 `json:"first_sync_s"` // agent start to its last transaction of the first sync, slowest node
	PodP50     float64 `json:"pod_p50_ms"`
	PodP99     float64 `json:"pod_p99_ms"`
	PodMax     float64 `json:"pod_max_ms"`
	PolP50     float64 `json:"policy_p50_ms"`
	PolP99     float64 `json:"policy_p99_ms"`
	PolMax     float64 `json:"policy_max_ms"`
	RRNoAgent  float64 `json:"rr_no_agent"`
	RRNoPolicy float64 `json:"rr_no_policy"`
	RRPolicies float64 `json:"rr_policies"`
	RRClosed   bool    `json:"rr_closed_port_dropped"` // with the policies, a port none allows was closed
	// CRR is new connections a second (connect, one byte each way, close)
	// between the two pods with the policies; Logged, the flow log's
	// records a second meanwhile (the flow log side).
	CRR    float64 `json:"crr"`
	Logged float64 `json:"flow_log_records_per_s,omitempty"`
	// FloodOffered and FloodLogged: new connections a second sent (SYNs
	// only, to an allowed and a refused port) and records a second the
	// flow log wrote of them (the flow log side, no rate limit): how many
	// logged connections a node takes.
	FloodOffered float64 `json:"flood_offered_per_s,omitempty"`
	FloodLogged  float64 `json:"flood_logged_per_s,omitempty"`
	RSSMiB       float64 `json:"rss_mib"` // the largest of the nodes' agents, at the end
	PeakMiB      float64 `json:"peak_mib"`
	// AnonMiB is that agent's RssAnon: its own pages (the heap, stacks,
	// the runtime's), RSS without the binary's file pages.
	AnonMiB float64 `json:"anon_mib"`
	Load    string  `json:"load"`
}

const sampleLabel = "bench-policy-sample"

// runSide runs one agent on fresh node namespaces against the shared API
// objects, and removes what it added to the API afterwards.
func (c *cluster) runSide(s side) (*result, error) {
	o := c.o
	r := &result{Side: s.name(), Nodes: o.nodes, Pods: o.pods, Policies: o.policies}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.close()
		}
		c.cleanAPI()
	}()
	for i := range o.nodes {
		n, err := c.newNode(s.tag(), i)
		if n != nil {
			nodes = append(nodes, n)
		}
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
	}
	if err := nodes[0].addRRPods(); err != nil {
		return nil, fmt.Errorf("request/response pods: %w", err)
	}
	var err error
	if r.RRNoAgent, _, err = nodes[0].rr(o); err != nil {
		return nil, fmt.Errorf("request/response without an agent: %w", err)
	}
	o.logf("%s: TCP_RR without an agent %.0f/s", s.name(), r.RRNoAgent)

	t0 := time.Now()
	for _, n := range nodes {
		if err := s.start(c, n); err != nil {
			return r, err
		}
	}
	for _, n := range nodes {
		if err := c.synced(s, n); err != nil {
			return r, err
		}
		n.watch.mu.Lock()
		r.SyncS = max(r.SyncS, n.watch.last.Sub(t0).Seconds())
		n.watch.mu.Unlock()
	}
	o.logf("%s: first sync %.2fs", s.name(), r.SyncS)
	if r.RRNoPolicy, _, err = nodes[0].rr(o); err != nil {
		return r, fmt.Errorf("request/response, no policy: %w", err)
	}
	o.logf("%s: TCP_RR, no policy selecting the pods %.0f/s", s.name(), r.RRNoPolicy)

	pods, err := c.podSamples(s, nodes)
	if err != nil {
		return r, err
	}
	r.PodP50, r.PodP99, r.PodMax = percentiles(pods)
	o.logf("%s: pod to every node p50 %.1f p99 %.1f max %.1f ms", s.name(), r.PodP50, r.PodP99, r.PodMax)
	pols, err := c.policySamples(s, nodes)
	if err != nil {
		return r, err
	}
	r.PolP50, r.PolP99, r.PolMax = percentiles(pols)
	o.logf("%s: policy to every node p50 %.1f p99 %.1f max %.1f ms", s.name(), r.PolP50, r.PolP99, r.PolMax)

	if err := c.rrPolicies(s, nodes[0]); err != nil {
		return r, err
	}
	if r.RRPolicies, r.RRClosed, err = nodes[0].rr(o); err != nil {
		return r, fmt.Errorf("request/response with %d policies: %w", o.rrPolicies, err)
	}
	o.logf("%s: TCP_RR, %d policies selecting the pods %.0f/s (closed port dropped: %v)", s.name(), o.rrPolicies, r.RRPolicies, r.RRClosed)
	before := countLines(flowLogOf(nodes[0]))
	crrStart := time.Now()
	if r.CRR, err = nodes[0].crr(o); err != nil {
		return r, fmt.Errorf("connections with %d policies: %w", o.rrPolicies, err)
	}
	if logged := countLines(flowLogOf(nodes[0])) - before; logged > 0 {
		r.Logged = float64(logged) / time.Since(crrStart).Seconds()
	}
	o.logf("%s: TCP_CRR, %d policies %.0f/s, flow log %.0f records/s", s.name(), o.rrPolicies, r.CRR, r.Logged)
	if cs, ok := s.(cniboxSide); ok && cs.flowLog {
		if r.FloodOffered, r.FloodLogged, err = nodes[0].floodLog(o); err != nil {
			return r, fmt.Errorf("a flood of new connections: %w", err)
		}
		o.logf("%s: a flood of %.0f new connections/s, %.0f logged/s", s.name(), r.FloodOffered, r.FloodLogged)
	}
	for _, n := range nodes {
		if err := n.exited(); err != nil {
			return r, err
		}
		m := n.mem()
		if mib := float64(m.RSS) / 1024; mib > r.RSSMiB {
			r.RSSMiB, r.AnonMiB = mib, float64(m.Anon)/1024
		}
		r.PeakMiB = max(r.PeakMiB, float64(m.HWM)/1024)
		if _, ok := s.(cniboxSide); ok {
			benchnode.SaveHeap("bench-policy", n.ns, fmt.Sprintf("policy-%s-%s.pb.gz", s.tag(), nodeName(n.i)))
		}
	}
	r.Load = loadavg()
	return r, nil
}

// synced waits for the node's first sync: policy chains in its kernel and
// no transaction for 3 s.
func (c *cluster) synced(s side, n *node) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if err := n.exited(); err != nil {
			return err
		}
		k, err := s.policyChains(n)
		if err == nil && k > 0 {
			if err := n.watch.quiet(3*time.Second, true, time.Until(deadline)); err != nil {
				return fmt.Errorf("%s: %w", nodeName(n.i), err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no policy chains after 3 minutes (%v):\n%s", nodeName(n.i), err, n.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settle waits until no node has committed a transaction for 300 ms.
func settle(nodes []*node) {
	for _, n := range nodes {
		n.watch.quiet(300*time.Millisecond, false, 10*time.Second)
	}
}

// podSamples creates pods one at a time, each Pending first and then
// turned Running with its address, and times the status update to the
// transaction that carries the address on every node (ms).
func (c *cluster) podSamples(s side, nodes []*node) ([]float64, error) {
	o := c.o
	var out []float64
	known := s.podKnown()
	for k := range o.samples {
		j := o.pods + k
		at := j % o.nodes
		ip := podIP(at, int(c.next[at].Add(1)-1))
		p := policyload.Pod(benchNS(j%o.namespaces), fmt.Sprintf("s-%d", k), nodeName(at), podLabels(j, o.namespaces))
		p.Labels[sampleLabel] = "1"
		p, err := c.cs.CoreV1().Pods(p.Namespace).Create(c.ctx, p, metav1.CreateOptions{})
		if err != nil {
			return out, err
		}
		settle(nodes)
		for _, n := range nodes {
			n.watch.lookFor(ip)
		}
		t0 := time.Now()
		if _, err := c.setRunning(p, ip); err != nil {
			return out, err
		}
		d, err := everyNode(nodes, func(n *node) (time.Time, error) {
			if known == nil {
				return n.watch.waitFor(t0, ip, nil, o.timeout)
			}
			return n.watch.waitFor(t0, netip.Addr{}, func() (bool, error) { return known(n, ip) }, o.timeout)
		})
		for _, n := range nodes {
			n.watch.forget(ip)
		}
		if err != nil {
			return out, fmt.Errorf("pod %s/%s (%s): %w", p.Namespace, p.Name, ip, err)
		}
		out = append(out, d.Sub(t0).Seconds()*1000)
	}
	return out, nil
}

// policySamples creates NetworkPolicies one at a time (each selecting pods
// on every node) and times the create to the transaction that adds its
// chain on every node (ms).
func (c *cluster) policySamples(s side, nodes []*node) ([]float64, error) {
	o := c.o
	var out []float64
	for k := range o.polSamples {
		q := o.policies + k
		p := policyload.Policy(fmt.Sprintf("s-%d", k), q, o.namespaces)
		p.Labels = map[string]string{sampleLabel: "1"}
		settle(nodes)
		base := make([]int, len(nodes))
		for i, n := range nodes {
			var err error
			if base[i], err = s.policyChains(n); err != nil {
				return out, err
			}
		}
		t0 := time.Now()
		if _, err := c.cs.NetworkingV1().NetworkPolicies(benchNS(q%o.namespaces)).Create(c.ctx, p, metav1.CreateOptions{}); err != nil {
			return out, err
		}
		d, err := everyNode(nodes, func(n *node) (time.Time, error) {
			return n.watch.waitFor(t0, netip.Addr{}, func() (bool, error) {
				k, err := s.policyChains(n)
				return k > base[n.i], err
			}, o.timeout)
		})
		if err != nil {
			return out, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		out = append(out, d.Sub(t0).Seconds()*1000)
	}
	return out, nil
}

// everyNode runs wait on every node at once and returns the latest time.
func everyNode(nodes []*node, wait func(*node) (time.Time, error)) (time.Time, error) {
	var (
		mu     sync.Mutex
		latest time.Time
		ferr   error
		wg     sync.WaitGroup
	)
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := wait(n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ferr == nil {
				ferr = fmt.Errorf("%s: %w", nodeName(n.i), err)
			}
			if t.After(latest) {
				latest = t
			}
		}()
	}
	wg.Wait()
	return latest, ferr
}

// rrPolicies creates the policies selecting the request/response pods and
// waits for node 0 to hold them all.
func (c *cluster) rrPolicies(s side, n *node) error {
	o := c.o
	settle([]*node{n})
	base, err := s.policyChains(n)
	if err != nil {
		return err
	}
	if err := policyload.Parallel(8, o.rrPolicies, func(k int) error {
		p := rrPolicy(k, o.rrPolicies)
		p.Labels = map[string]string{sampleLabel: "1"}
		_, err := c.cs.NetworkingV1().NetworkPolicies(rrNamespace).Create(c.ctx, p, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("request/response policies: %w", err)
	}
	_, err = n.watch.waitFor(time.Now(), netip.Addr{}, func() (bool, error) {
		k, err := s.policyChains(n)
		return k >= base+o.rrPolicies, err
	}, 3*time.Minute)
	if err != nil {
		return fmt.Errorf("request/response policies on %s: %w", nodeName(n.i), err)
	}
	return n.watch.quiet(2*time.Second, false, time.Minute)
}

// cleanAPI deletes what a side added: the sample pods and policies and the
// request/response policies.
func (c *cluster) cleanAPI() {
	zero := int64(0)
	sel := metav1.ListOptions{LabelSelector: sampleLabel}
	for i := range c.o.namespaces + 1 {
		ns := rrNamespace
		if i < c.o.namespaces {
			ns = benchNS(i)
		}
		c.cs.CoreV1().Pods(ns).DeleteCollection(c.ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel)
		c.cs.NetworkingV1().NetworkPolicies(ns).DeleteCollection(c.ctx, metav1.DeleteOptions{}, sel)
	}
}

// percentiles are p50, p99 and the maximum (nearest rank).
func percentiles(v []float64) (p50, p99, mx float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func printResults(o *options, rs []*result) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\nbench-policy: %d nodes, %d pods, %d NetworkPolicies; %d pods and %d policies timed one at a time; TCP_RR %s x %d (median), %d policies selecting both pods\n\n",
		o.nodes, o.pods, o.policies, o.samples, o.polSamples, o.rrDuration, o.rrRuns, o.rrPolicies)
	fmt.Println("| agent | first sync | pod Running -> every node p50 / p99 / max | policy created -> every node p50 / p99 / max | TCP_RR no agent | TCP_RR agent, no policy | TCP_RR 200 policies (vs no policy) | other port dropped | TCP_CRR 200 policies | flow log records | flood: SYNs sent / logged | RSS (anon) / peak (largest node) | load |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rs {
		fmt.Printf("| %s | %.2f s | %.1f / %.1f / %.1f ms | %.1f / %.1f / %.1f ms | %.0f/s | %.0f/s | %.0f/s (%+.1f%%) | %v | %.0f/s | %.0f/s | %.0f / %.0f/s | %.1f (%.1f) / %.1f MiB | %s |\n",
			r.Side, r.SyncS, r.PodP50, r.PodP99, r.PodMax, r.PolP50, r.PolP99, r.PolMax,
			r.RRNoAgent, r.RRNoPolicy, r.RRPolicies, (r.RRPolicies/r.RRNoPolicy-1)*100, r.RRClosed, r.CRR, r.Logged, r.FloodOffered, r.FloodLogged, r.RSSMiB, r.AnonMiB, r.PeakMiB, r.Load)
	}
}

func writeJSON(o *options, rs []*result) error {
	if o.json == "" {
		return nil
	}
	f, err := os.OpenFile(o.json, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
