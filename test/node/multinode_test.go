//go:build kube

package node

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// clusterUplink is the underlay's address in the cluster's namespace (the
// bridge the nodes' eth0 plug into); node i (from 1) is 172.31.250.(10+i).
const clusterUplink = "172.31.250.1"

// cluster is a control plane in namespaces of its own, which is also the
// underlay (node.sh cluster), and kubelet nodes joined to it (node.sh
// join), each in its own namespaces. kubectl runs in the control plane's.
type cluster struct {
	*node
	nodes []*node
}

// startCluster starts the control plane and n nodes (node-1 ... node-n),
// imports the busybox pod image into every node and gives each node's CNI
// bin dir the reference plugins, as a kubeadm node has them (Debian's
// containernetworking-plugins: kubeadm's kubernetes-cni package puts the
// same plugins there). Its cleanup logs, on failure, the cluster's state
// and each node's logs, then stops every node and the control plane.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return startClusterWith(t, n, clusterOpts{})
}

// clusterOpts change what startClusterWith starts.
type clusterOpts struct {
	env     []string // node.sh's environment, for the control plane and every node
	plugins string   // the CNI plugins every node gets (default refPluginDir)
	// dualStack gives the underlay IPv6 too: clusterUplink6 on the
	// control plane's bridge, node i clusterUplink6's prefix ::(10+i)
	dualStack bool
}

// clusterUplink6 is the underlay's IPv6 address of a dual-stack cluster.
const clusterUplink6 = "fd00:172:31:250::1"

// startClusterWith is startCluster with opts.
func startClusterWith(t *testing.T, n int, opts clusterOpts) *cluster {
	t.Helper()
	kubeBin := kubeBinaries(t)
	start := time.Now()
	var v6 []string
	if opts.dualStack {
		v6 = []string{"UPLINK_IP6=" + clusterUplink6}
	}
	cp := launch(t, t.TempDir(), kubeBin, "cluster", slices.Concat([]string{"UPLINK_IP=" + clusterUplink}, v6, opts.env)...)
	cp.kubeconfig = filepath.Join(cp.dir, "cp", "kubeconfig")
	c := &cluster{node: cp}
	bb := filepath.Join(cp.dir, "busybox.tar")
	writeBusyboxImage(t, bb, busyboxRef)
	plugins := cmp.Or(opts.plugins, refPluginDir)
	refs, err := os.ReadDir(plugins)
	if err != nil {
		t.Fatalf("the reference plugins: %v (apt-get install containernetworking-plugins)", err)
	}
	for i := 1; i <= n; i++ {
		name, ip := fmt.Sprintf("node-%d", i), fmt.Sprintf("172.31.250.%d", 10+i)
		if opts.dualStack {
			v6 = []string{"UPLINK_IP6=" + clusterUplink6, fmt.Sprintf("NODE_IP6=fd00:172:31:250::%d", 10+i)}
		}
		nd := launch(t, t.TempDir(), kubeBin, "join", slices.Concat([]string{"NODE_NAME=" + name, "NODE_IP=" + ip, "UPLINK_IP=" + clusterUplink,
			fmt.Sprintf("UNDERLAY=/proc/%d/ns/net", cp.init), "CLUSTER_DIR=" + cp.dir}, v6, opts.env)...)
		nd.api, nd.name, nd.ip = cp, name, ip
		t.Cleanup(nd.diagnose)
		nd.ctr("images", "import", bb)
		for _, r := range refs {
			if !r.Type().IsRegular() || strings.HasPrefix(r.Name(), ".") {
				continue // upstream's marker and build dirs
			}
			copyFile(t, filepath.Join(plugins, r.Name()), filepath.Join(nd.hostDir("/opt/cni/bin"), r.Name()), 0o755)
		}
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(c.diagnose)
	c.poll("every node registered", func() error {
		out, err := c.kubectl("get", "nodes", "-o", "name")
		if err != nil {
			return err
		}
		if got := len(strings.Fields(out)); got != n {
			return fmt.Errorf("%d nodes: %s", got, out)
		}
		return nil
	})
	t.Logf("a control plane and %d nodes up after %v", n, time.Since(start).Round(time.Second))
	return c
}

// step runs one step of a test, logging its name and how long it took.
func step(t *testing.T, name string, fn func()) {
	t.Helper()
	t.Logf("== %s", name)
	s := time.Now()
	fn()
	t.Logf("== %s: done in %v", name, time.Since(s).Round(100*time.Millisecond))
}

// refPluginDir holds Debian's reference plugins.
const refPluginDir = "/usr/lib/cni"

// diagnose logs the cluster's nodes, pods and events and the overlay
// DaemonSets' logs, when the test failed (before any node stops).
func (c *cluster) diagnose() {
	t := c.t
	if !t.Failed() {
		return
	}
	for _, args := range [][]string{
		{"get", "nodes,pods", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"-n", "kube-flannel", "logs", "-l", "app=flannel", "--all-containers", "--prefix", "--tail=40"},
		{"-n", "kube-system", "logs", "-l", "app=cnibox", "--all-containers", "--prefix", "--tail=40"},
	} {
		out, err := c.kubectl(args...)
		t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// importImages imports the image archives into every node's containerd.
func (c *cluster) importImages(archives ...string) {
	for _, n := range c.nodes {
		for _, a := range archives {
			n.ctr("images", "import", a)
		}
	}
}

// startPodsOn starts a pod on each node (prefix-N on node-N), waits for
// them, and returns their names in the nodes' order, checking that each
// has an address in its node's podCIDR.
func (c *cluster) startPodsOn(prefix string, nodes ...*node) []string {
	t := c.t
	t.Helper()
	var pods []string
	args := []string{"wait", "--for=condition=Ready", c.timeout()}
	for _, n := range nodes {
		name := prefix + "-" + strings.TrimPrefix(n.name, "node-")
		c.apply(podSpec(name, n.name, nil))
		pods = append(pods, name)
		args = append(args, "pod/"+name)
	}
	c.must(args...)
	for i, name := range pods {
		n := nodes[i]
		cidr := c.podCIDR(n)
		if ip := podIP(t, c.node, name); !cidr.Contains(ip) {
			t.Fatalf("pod %s on %s has %s, outside the node's podCIDR %s", name, n.name, ip, cidr)
		} else {
			t.Logf("pod %s on %s: %s", name, n.name, ip)
		}
	}
	return pods
}

// podCIDR is the node's spec.podCIDR.
func (c *cluster) podCIDR(n *node) netip.Prefix {
	c.t.Helper()
	var nd corev1.Node
	if err := json.Unmarshal([]byte(c.must("get", "node", n.name, "-o", "json")), &nd); err != nil {
		c.t.Fatal(err)
	}
	cidr, err := netip.ParsePrefix(nd.Spec.PodCIDR)
	if err != nil {
		c.t.Fatalf("node %s: podCIDR %q: %v", n.name, nd.Spec.PodCIDR, err)
	}
	return cidr
}

// uniqueAddresses fails the test if two pods that have an address have
// the same one (kubectl get pods -o wide would show it).
func (c *cluster) uniqueAddresses() {
	c.t.Helper()
	var pods corev1.PodList
	if err := json.Unmarshal([]byte(c.must("get", "pods", "-o", "json")), &pods); err != nil {
		c.t.Fatal(err)
	}
	seen := map[string]string{}
	for _, p := range pods.Items {
		if ip := p.Status.PodIP; ip != "" {
			if other, ok := seen[ip]; ok {
				c.t.Fatalf("pods %s and %s both have the address %s", other, p.Name, ip)
			}
			seen[ip] = p.Name
		}
	}
}

// pingFresh: the fresh pods reach each other, and each reaches an old pod
// on another node (old and fresh in the nodes' order) and is reached by it.
func (c *cluster) pingFresh(old, fresh []string) {
	c.t.Helper()
	c.pingMesh(fresh...)
	for i, p := range fresh {
		o := old[(i+1)%len(old)]
		mustPing(c.t, c.node, p, o)
		mustPing(c.t, c.node, o, p)
	}
}

// pingMesh: every pod reaches every other pod.
func (c *cluster) pingMesh(pods ...string) {
	c.t.Helper()
	for _, from := range pods {
		for _, to := range pods {
			if from != to {
				mustPing(c.t, c.node, from, to)
			}
		}
	}
}

// pingInterval is the interval of the pings that run through a rollout,
// and maxOutage the longest a pod pair may go without an answer.
const (
	pingInterval = 200 * time.Millisecond
	maxOutage    = 2 * time.Second
)

// pinger is `ping` from one pod to another, running in the pod (kubectl
// exec) until stopped.
type pinger struct {
	from, to string
	out      *syncBuffer
	done     chan error
}

// startPings starts a ping from each pod to the next (the last to the
// first), every pingInterval, and waits until each has an answer.
func (c *cluster) startPings(pods ...string) []*pinger {
	c.t.Helper()
	var ps []*pinger
	for i, from := range pods {
		to := pods[(i+1)%len(pods)]
		p := &pinger{from: from, to: to, out: &syncBuffer{}, done: make(chan error, 1)}
		cmd := c.kubectlCmd("exec", from, "--", "ping", "-i", strconv.FormatFloat(pingInterval.Seconds(), 'f', -1, 64), "-w", "1800", podIP(c.t, c.node, to).String())
		cmd.Stdout, cmd.Stderr = p.out, p.out
		if err := cmd.Start(); err != nil {
			c.t.Fatal(err)
		}
		go func() { p.done <- cmd.Wait() }()
		c.t.Cleanup(func() { cmd.Process.Kill() })
		ps = append(ps, p)
	}
	for _, p := range ps {
		c.poll("ping "+p.from+" -> "+p.to+" answered", func() error {
			if !strings.Contains(p.out.String(), "bytes from") {
				return fmt.Errorf("no answer yet: %q", p.out.String())
			}
			return nil
		})
	}
	return ps
}

var pingSeq = regexp.MustCompile(`bytes from .*seq=(\d+)`)

// stopPings stops the pings (SIGINT: ping prints its statistics), reports
// for each pair what was lost and the longest outage, and fails the test
// if a pair went without an answer for longer than maxOutage.
func (c *cluster) stopPings(what string, ps []*pinger) {
	t := c.t
	t.Helper()
	for _, p := range ps {
		if _, err := c.kubectl("exec", p.from, "--", "killall", "-INT", "ping"); err != nil {
			t.Fatalf("stop the ping in %s: %v", p.from, err)
		}
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Fatalf("ping %s -> %s did not stop: %s", p.from, p.to, p.out.String())
		}
		out := p.out.String()
		m := pingStats.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ping %s -> %s: no statistics:\n%s", p.from, p.to, out)
		}
		sent, _ := strconv.Atoi(m[1])
		got := map[int]bool{}
		for _, s := range pingSeq.FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(s[1])
			got[n] = true
		}
		// the longest run of unanswered requests; the last one may be
		// in flight when ping is stopped
		longest, run, lost := 0, 0, 0
		for seq := 0; seq < sent-1; seq++ {
			if got[seq] {
				run = 0
				continue
			}
			lost++
			run++
			longest = max(longest, run)
		}
		outage := time.Duration(longest+1) * pingInterval
		if longest == 0 {
			outage = 0
		}
		t.Logf("%s: ping %s -> %s: %d sent, %d lost, longest outage %v", what, p.from, p.to, sent, lost, outage)
		if sent < 10 {
			t.Fatalf("%s: ping %s -> %s sent %d requests only:\n%s", what, p.from, p.to, sent, out)
		}
		if outage > maxOutage {
			var missing []string
			for seq := 0; seq < sent-1; seq++ {
				if !got[seq] {
					missing = append(missing, strconv.Itoa(seq))
				}
			}
			t.Errorf("%s: pod %s lost %s for %v (more than %v): requests %s unanswered", what, p.from, p.to, outage, maxOutage, strings.Join(missing, " "))
		}
	}
}

// watchRollout polls the DaemonSet's pods until the rollout is done and
// returns the distinct states it saw (node -> image of its Ready pod),
// logging each.
func (c *cluster) watchRollout(ns, selector, ds string) []map[string]string {
	t := c.t
	t.Helper()
	var states []map[string]string
	last := ""
	start := time.Now()
	deadline := start.Add(c.wait())
	for {
		var pods corev1.PodList
		out, err := c.kubectl("-n", ns, "get", "pods", "-l", selector, "-o", "json")
		if err == nil && json.Unmarshal([]byte(out), &pods) == nil {
			state := map[string]string{}
			for _, p := range pods.Items {
				ready := false
				for _, cond := range p.Status.Conditions {
					ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
				}
				if ready && p.DeletionTimestamp == nil {
					state[p.Spec.NodeName] = p.Spec.Containers[0].Image
				}
			}
			var keys []string
			for n, img := range state {
				keys = append(keys, n+"="+img)
			}
			sort.Strings(keys)
			if s := strings.Join(keys, " "); s != last {
				last = s
				states = append(states, state)
				t.Logf("ready %s pods after %v: %s", ds, time.Since(start).Round(100*time.Millisecond), s)
			}
		}
		if st, err := c.kubectl("-n", ns, "rollout", "status", "ds/"+ds, "--watch=false"); err == nil && strings.Contains(st, "successfully rolled out") {
			return states
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout of ds/%s is not done after %v", ds, c.wait())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// mixed: some state had Ready pods of both images on different nodes.
func mixed(states []map[string]string, a, b string) bool {
	for _, s := range states {
		seen := map[string]bool{}
		for _, img := range s {
			seen[img] = true
		}
		if seen[a] && seen[b] {
			return true
		}
	}
	return false
}
