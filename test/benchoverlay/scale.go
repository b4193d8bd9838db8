package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cnibox/cnibox/agent/lease"
)

// scaleRow is one N of the scale table.
type scaleRow struct {
	Nodes      int     `json:"nodes"`
	ConvergeS  float64 `json:"converge_s"`  // last agent start -> every node has every peer
	Mismatches int     `json:"mismatches"`  // peers wrong after convergence (full check)
	Exits      int     `json:"agent_exits"` // agents that ended on their own
	LostRaces  int     `json:"lost_races"`  // lease collisions retried inside the agents
	RemovalMS  float64 `json:"removal_ms"`  // lease deleted -> route gone on every other node
	RSSMiB     float64 `json:"rss_mib"`     // median resident set after convergence
	RSSMaxMiB  float64 `json:"rss_max_mib"` // largest peak resident set
	AnonMiB    float64 `json:"anon_mib"`    // median anonymous part of the resident set
	FileMiB    float64 `json:"file_mib"`    // median file part (the binary's pages, shared)
	PSSMiB     float64 `json:"pss_mib"`     // median proportional set size
	CPUms      float64 `json:"cpu_ms"`      // mean CPU per agent, start to convergence
	StartS     float64 `json:"start_s"`     // time to start all agents
}

func scaleRun(o *options, n int) (scaleRow, error) {
	row := scaleRow{Nodes: n}
	c, err := newCluster(o, n, `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`)
	defer c.close()
	if err != nil {
		return row, err
	}
	for _, nd := range c.nodes {
		nd.routes.SetWant(n - 1)
	}

	// Start every agent, as fast as processes start.
	t0 := time.Now()
	for _, nd := range c.nodes {
		if err := nd.startAgent(); err != nil {
			return row, err
		}
	}
	last := time.Now()
	row.StartS = last.Sub(t0).Seconds()
	c.logf("N=%d: %d agents started in %s", n, n, last.Sub(t0))

	deadline := last.Add(o.timeout)
	for {
		done, converged := 0, last
		for _, nd := range c.nodes {
			if t, _ := nd.routes.Complete(); !t.IsZero() {
				done++
				if t.After(converged) {
					converged = t
				}
			}
		}
		if done == n {
			row.ConvergeS = converged.Sub(last).Seconds()
			break
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("only %d of %d nodes have every peer after %s (agent logs in %s)", done, n, o.timeout, c.dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.logf("N=%d: converged %.2fs after the last start", n, row.ConvergeS)

	// Untimed: every node matches the leases exactly; usage; exits.
	leases, err := c.leases()
	if err != nil {
		return row, err
	}
	if len(leases) != n {
		return row, fmt.Errorf("etcd holds %d leases for %d nodes", len(leases), n)
	}
	var rss, anons, files, psss []int
	var cpu time.Duration
	for _, nd := range c.nodes {
		row.Mismatches += nd.mismatches(leases)
		if nd.exited() {
			row.Exits++
			continue
		}
		r, hwm, anon, file, pss, u := nd.usageDetail()
		rss, anons, files, psss = append(rss, r), append(anons, anon), append(files, file), append(psss, pss)
		cpu += u
		row.RSSMaxMiB = max(row.RSSMaxMiB, float64(hwm)/1024)
		row.LostRaces += nd.lostRaces()
	}
	if len(rss) > 0 {
		for _, l := range [][]int{rss, anons, files, psss} {
			slices.Sort(l)
		}
		row.RSSMiB = float64(rss[len(rss)/2]) / 1024
		row.AnonMiB = float64(anons[len(anons)/2]) / 1024
		row.FileMiB = float64(files[len(files)/2]) / 1024
		row.PSSMiB = float64(psss[len(psss)/2]) / 1024
		row.CPUms = float64(cpu.Milliseconds()) / float64(len(rss))
	}

	// One node leaves: its agent stops, its lease is deleted; time until
	// every other node has dropped its route (the agent deletes it first, then
	// the neighbour and the FDB entry).
	gone := c.nodes[n-1]
	gone.stopAgent()
	var sn netip.Prefix
	for s, l := range leases {
		if l.Attrs.PublicIP == gone.ip {
			sn = s
		}
	}
	if !sn.IsValid() {
		return row, fmt.Errorf("no lease of node %s", gone.ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cpuBefore := c.agentCPU()
	tDel := time.Now()
	if _, err := c.etcd.Delete(ctx, path.Join(etcdPrefix, "subnets", lease.SubnetKey(sn, netip.Prefix{}))); err != nil {
		return row, err
	}
	removed := tDel
	for deadline := time.Now().Add(30 * time.Second); ; {
		all := true
		for _, nd := range c.nodes[:n-1] {
			t, ok := nd.routes.Deleted(sn)
			if !ok {
				all = false
				break
			}
			if t.After(removed) {
				removed = t
			}
		}
		if all {
			row.RemovalMS = float64(removed.Sub(tDel).Microseconds()) / 1000
			if o.verbose {
				var ds []time.Duration
				for _, nd := range c.nodes[:n-1] {
					t, _ := nd.routes.Deleted(sn)
					ds = append(ds, t.Sub(tDel))
				}
				slices.Sort(ds)
				c.logf("N=%d: removal reached the first node after %s, half after %s, all after %s; agents used %s CPU", n, ds[0], ds[len(ds)/2], ds[len(ds)-1], c.agentCPU()-cpuBefore)
			}
			break
		}
		if time.Now().After(deadline) {
			return row, fmt.Errorf("the removal of %s did not reach every node", sn)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return row, nil
}

// report prints the tables and the JSON lines.
type report struct {
	o      *options
	scales []scaleRow
	tputs  []tputRow
}

func newReport(o *options) *report { return &report{o: o} }

func (r *report) scale(row scaleRow) {
	r.scales = append(r.scales, row)
	fmt.Printf("N=%-4d converge %6.2f s  mismatches %d  agent exits %d  lost races %3d  removal %6.1f ms  RSS %5.1f MiB (anon %4.1f + binary %4.1f, peak %5.1f, PSS %4.1f)  CPU %6.0f ms/agent  (starting took %.2f s)\n",
		row.Nodes, row.ConvergeS, row.Mismatches, row.Exits, row.LostRaces, row.RemovalMS, row.RSSMiB, row.AnonMiB, row.FileMiB, row.RSSMaxMiB, row.PSSMiB, row.CPUms, row.StartS)
}

func (r *report) throughput(rows []tputRow) {
	r.tputs = rows
	var base float64
	for _, t := range rows {
		if t.Path == "pods, no overlay (direct routing)" {
			base = t.Gbps
		}
	}
	for _, t := range rows {
		ratio := ""
		if base > 0 {
			ratio = fmt.Sprintf("  %.2f of the plain path", t.Gbps/base)
		}
		fmt.Printf("throughput %-36s %6.2f Gbit/s  RTT %6.1f µs  MTU %d  fragments %d%s\n", t.Path, t.Gbps, t.RTTus, t.MTU, t.Fragments, ratio)
	}
}

// flush writes the JSON lines; the exit code is 1 when a run was wrong.
func (r *report) flush() int {
	var lines []string
	code := 0
	for _, s := range r.scales {
		lines = append(lines, jsonLine("scale", s))
		if s.Mismatches > 0 || s.Exits > 0 {
			code = 1
		}
	}
	for _, t := range r.tputs {
		lines = append(lines, jsonLine("throughput", t))
		if t.Fragments > 0 {
			code = 1
		}
	}
	out := strings.Join(lines, "\n") + "\n"
	if r.o.json != "" {
		if err := os.WriteFile(r.o.json, []byte(out), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench-overlay:", err)
			return 1
		}
	} else {
		fmt.Print(out)
	}
	return code
}

// agentCPU is the CPU time used by the running agents so far.
func (c *cluster) agentCPU() time.Duration {
	var total time.Duration
	for _, nd := range c.nodes {
		_, _, u := nd.usage()
		total += u
	}
	return total
}
