//go:build kube

package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// Reachability bounds: a pod answers a peer on another node within
// newPodBound of being seen Running, and a pod that answered is never
// unreachable for longer than faultBound (nodeRebootBound for the pods of
// a node that rebooted: they get new sandboxes).
const (
	newPodBound  = 10 * time.Second
	faultBound   = 5 * time.Second
	probeTimeout = time.Second
	probeWorkers = 8
)

// proc is a process of the machine: its PID and command line.
type proc struct {
	pid  int
	argv []string
}

// procs lists the machine's processes whose command line match accepts.
func procs(match func(pid int, argv []string) bool) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if match(pid, argv) {
			out = append(out, proc{pid, argv})
		}
	}
	return out
}

// nsOf is the namespace link of kind (net, pid) of process pid.
func nsOf(pid int, kind string) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	return l
}

// proberNetns is the network namespace (a /proc path) of the prober on
// node (the allowed one of soakPolicyNS when allowed), found by its
// command line; cached until its process is gone.
func (s *soak) proberNetns(node string, allowed bool) string {
	s.mu.Lock()
	cache := s.probers
	if allowed {
		cache = s.allowed
	}
	path := cache[node]
	s.mu.Unlock()
	marker := proberMarker(node, allowed)
	want := marker[len(marker)-1]
	if path != "" {
		if raw, err := os.ReadFile(strings.TrimSuffix(path, "/ns/net") + "/cmdline"); err == nil && strings.Contains(string(raw), want) {
			return path
		}
	}
	found := procs(func(_ int, argv []string) bool {
		return len(argv) == 3 && argv[0] == "sh" && argv[2] == want
	})
	if len(found) == 0 {
		return ""
	}
	path = fmt.Sprintf("/proc/%d/ns/net", found[0].pid)
	s.mu.Lock()
	cache[node] = path
	if allowed {
		// A new sandbox of the allowed prober, a pod of soakPolicyNS, is
		// pending until its node's agent has seen its address (seed 17:
		// node-3's, 20 s after its reboot ended).
		s.unsettled[node] = time.Now()
	}
	s.mu.Unlock()
	return path
}

// dialFrom connects to addr from the network namespace nsPath (the
// socket is made there; the thread goes back to its own namespace). A
// refused connection is an answer: the network delivered the SYN.
func dialFrom(nsPath, addr string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		conn, err := net.DialTimeout("tcp", addr, probeTimeout)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread() // else the thread ends with the goroutine
		}
		if conn != nil {
			conn.Close()
		}
		errc <- err
	}()
	return <-errc
}

// answered reports whether err is an answer: a connection, or a refusal.
func answered(err error) bool {
	return err == nil || errors.Is(err, syscall.ECONNREFUSED)
}

// rebooting reports whether node is being rebooted (its pods and
// probers are down by design).
func (s *soak) rebooting(node string) bool {
	return s.fault != nil && s.fault.kind == faultReboot && s.fault.node == node
}

// agentDown reports whether node's agent is being killed and restarted
// or the node rebooted, now. Under s.mu.
func (s *soak) agentDown(node string) bool {
	f := s.fault
	return f != nil && f.node == node && (f.kind == faultAgentKill || f.kind == faultReboot)
}

// settled reports whether the allowed prober of node is placed by its
// node's agent and known to the others: no agent kill or reboot of the
// node in progress, none ended, no new sandbox of the prober found, and
// no new address of it seen in the API, less than newPodBound ago
// (a new sandbox of a pod of soakPolicyNS is pending until its agent sees
// its address: fail closed, which makes the prober, not the pod probed,
// unreachable). Under s.mu.
func (s *soak) settled(node string) bool {
	if s.agentDown(node) {
		return false
	}
	// and the other nodes' agents have had newPodBound to learn its
	// address from the API, since the observer saw it there (seed 23: a
	// prober new after its node's reboot, whose address its kubelet
	// reported later than newPodBound after its sandbox, under load 20-36)
	return time.Since(s.unsettled[node]) > newPodBound && s.allowedIP[node] != "" && time.Since(s.allowedAt[node]) > newPodBound
}

// probeLoop probes, every second, each running churned pod from a peer on
// another node: the pods of soakPolicyNS from an allowed peer, and from a
// denied peer, which must never get in.
func (s *soak) probeLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		s.mu.Lock()
		var todo []*podState
		for _, p := range s.pods {
			if !p.deleting && p.ip != "" && !s.rebooting(p.node) {
				todo = append(todo, p)
			}
		}
		s.mu.Unlock()
		work := make(chan *podState)
		var wg sync.WaitGroup
		for range probeWorkers {
			wg.Go(func() {
				for p := range work {
					s.probe(p)
				}
			})
		}
		for _, p := range todo {
			work <- p
		}
		close(work)
		wg.Wait()
	}
}

// probe probes pod p once and records what it finds.
func (s *soak) probe(p *podState) {
	s.mu.Lock()
	ip, node, ns := p.ip, p.node, p.ns
	var peers []string
	for _, n := range s.c.nodes {
		if n.name != node && !s.rebooting(n.name) && (ns != soakPolicyNS || s.settled(n.name)) {
			peers = append(peers, n.name)
		}
	}
	s.mu.Unlock()
	if len(peers) == 0 {
		return
	}
	peer := peers[s.intn(len(peers))]
	nsPath := s.proberNetns(peer, ns == soakPolicyNS)
	if nsPath == "" {
		return
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(soakPort))
	err := dialFrom(nsPath, addr)
	if ns == soakPolicyNS {
		s.probeDenied(p, addr)
	}
	now := time.Now()
	s.mu.Lock()
	if p.ip != ip || p.deleting {
		s.mu.Unlock()
		return
	}
	var msg, inv string
	switch {
	case answered(err) && p.reachedAt.IsZero():
		p.reachedAt, p.lastOK = now, now
	case answered(err):
		if out := now.Sub(p.lastOK); p.downKind != "" {
			kind := p.downKind
			if out > s.longest[kind] {
				s.longest[kind] = out
			}
			msg = fmt.Sprintf("%s (%s on %s) answers again after %.1fs", p.key(), ip, node, out.Seconds())
		}
		p.lastOK, p.downKind = now, ""
	case p.reachedAt.IsZero():
		// a pod of a node that rebooted gets a new sandbox: it has
		// nodeRebootBound from the reboot's end; one of a node whose
		// agent was killed, newPodBound from the new agent's start (and
		// none while the agent is still down: seed 23's soak-np/c-1081,
		// started during a 22.7 s agent restart, closed until it ended)
		if !(ns == soakPolicyNS && s.agentDown(node)) && now.Sub(p.runningAt) > newPodBound && now.Sub(p.rebootedAt) > nodeRebootBound &&
			now.Sub(p.agentBackAt) > newPodBound && !p.flaggedNew {
			p.flaggedNew = true
			inv = "reach-new"
			msg = fmt.Sprintf("%s (%s on %s) Running for %.1fs, no answer from %s: %v", p.key(), ip, node, now.Sub(p.runningAt).Seconds(), peer, err)
		}
	default:
		if p.downKind == "" {
			p.downKind = s.faultBefore()
		}
		bound := faultBound
		if strings.HasPrefix(p.downKind, faultReboot) {
			bound = nodeRebootBound
		}
		if out := now.Sub(p.lastOK); out > bound && !p.flaggedDown {
			p.flaggedDown = true
			inv = "reach-after-fault"
			msg = fmt.Sprintf("%s (%s on %s) unanswered for %.1fs from %s (bound %v): %v", p.key(), ip, node, out.Seconds(), peer, bound, err)
		}
	}
	s.mu.Unlock()
	switch {
	case inv != "":
		s.breach(inv, "%s", msg)
		if inv == "reach-after-fault" {
			s.pathEvidence(peer, node)
		}
	case msg != "":
		s.logf("%s", msg)
	}
}

// probeDenied connects to a pod of soakPolicyNS from a denied peer (any
// node's prober in soakNS): the policy must drop it.
func (s *soak) probeDenied(p *podState, addr string) {
	node := s.c.nodes[s.intn(len(s.c.nodes))].name
	s.mu.Lock()
	skip := s.rebooting(node)
	s.mu.Unlock()
	if skip {
		return
	}
	nsPath := s.proberNetns(node, false)
	if nsPath == "" {
		return
	}
	if err := dialFrom(nsPath, addr); err == nil {
		s.mu.Lock()
		since, deleting := time.Since(p.runningAt), p.deleting
		s.mu.Unlock()
		s.breach("policy", "%s (%s on %s, seen Running %.1fs ago, deleting %v) accepted a connection from the denied prober on %s",
			p.key(), addr, p.node, since.Seconds(), deleting, node)
		s.policyEvidence(p)
	}
}

// faultBefore names the fault in progress or the last one (with its
// node), under s.mu.
func (s *soak) faultBefore() string {
	if s.fault != nil {
		return s.fault.kind
	}
	if s.lastKind == "" {
		return "none"
	}
	return s.lastKind
}

// rssSample is one agent's resident set at a time.
type rssSample struct {
	at  time.Duration // since the start
	kib int
}

// sampleRSS records every 15 s the resident set of each node's agent
// (cnibox-agent-kube in the node's network namespace: it runs with
// hostNetwork).
func (s *soak) sampleRSS(stop <-chan struct{}) {
	for {
		for _, n := range s.c.nodes {
			for _, p := range s.agents(n) {
				if kib := rssKiB(p.pid); kib > 0 {
					s.mu.Lock()
					s.rss[n.name] = append(s.rss[n.name], rssSample{time.Since(s.start), kib})
					s.mu.Unlock()
				}
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(15 * time.Second):
		}
	}
}

// agents are the cnibox-agent processes of node n.
func (s *soak) agents(n *node) []proc {
	want := nsOf(n.init, "net")
	return procs(func(pid int, argv []string) bool {
		return filepath.Base(argv[0]) == "cnibox-agent-kube" && nsOf(pid, "net") == want
	})
}

// rssKiB is VmRSS of pid in KiB (0 if gone).
func rssKiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, _ := strconv.Atoi(f[1])
			return kib
		}
	}
	return 0
}

// policyEvidence writes, once per pod, what the node of a policy breach
// says: the pod as the API has it and the node's policy view (cnibox
// inspect policy), into the report directory.
func (s *soak) policyEvidence(p *podState) {
	var n *node
	for _, nd := range s.c.nodes {
		if nd.name == p.node {
			n = nd
		}
	}
	if n == nil {
		return
	}
	pod, _ := s.c.kubectl("-n", p.ns, "get", "pod", p.name, "-o", "yaml")
	cnibox := filepath.Join(n.hostDir("/opt/cni/bin"), "cnibox")
	pol, err := n.onNode(cnibox, "inspect", "policy")
	logs, _ := s.c.kubectl("-n", "kube-system", "logs", "-l", "app=cnibox", "--prefix", "--tail=200", "-c", "agent")
	f := filepath.Join(s.report, "policy-"+p.ns+"-"+p.name+".txt")
	if _, err := os.Stat(f); err == nil {
		return
	}
	os.WriteFile(f, []byte(fmt.Sprintf("%s\n\n---- cnibox inspect policy on %s (%v)\n%s\n---- agents' logs\n%s", pod, n.name, err, pol, logs)), 0o644)
}

// pathEvidence logs what the two nodes' overlay holds for each other when
// a pod of one went unanswered from the other (seed 31: both directions
// between two nodes at once, not explained): flannel.1's FDB and
// neighbours, and the routes into the pod network.
func (s *soak) pathEvidence(names ...string) {
	for _, n := range s.c.nodes {
		if !slices.Contains(names, n.name) {
			continue
		}
		out, err := n.onNode("sh", "-c", "bridge fdb show dev flannel.1; ip neigh show dev flannel.1; ip -4 route show; ip -d link show flannel.1")
		s.logf("%s: overlay now: %v\n%s", n.name, err, out)
	}
}
