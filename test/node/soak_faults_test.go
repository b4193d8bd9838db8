//go:build kube

package node

import (
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The faults, one at a time.
const (
	faultAgentKill  = "agent-kill"         // SIGKILL of a node's cnibox-agent
	faultContainerd = "containerd-restart" // a node's containerd stopped and started
	faultAPIStop    = "apiserver-stop"     // SIGSTOP, a pause, SIGCONT of the API server
	faultEtcd       = "etcd-kill"          // SIGKILL of etcd, started again
	faultReboot     = "node-reboot"        // kubelet, containerd and pods killed, pod interfaces and /run wiped
	// nodeRebootBound: the pods of a rebooted node answer again within it
	// (new sandboxes, new addresses).
	nodeRebootBound = 90 * time.Second
	recoverWait     = 3 * time.Minute
)

var faultKinds = []string{faultAgentKill, faultContainerd, faultAPIStop, faultEtcd, faultReboot}

// injectFaults injects one fault at a time, the kind and node drawn from
// the seed, after a pause of 10 to 30 s, until end.
func (s *soak) injectFaults(end time.Time) {
	rng := rand.New(rand.NewPCG(s.seed, 2))
	kinds := faultKinds
	if k := os.Getenv("CNIBOX_SOAK_FAULTS"); k != "" {
		kinds = strings.Split(k, ",")
	}
	for {
		wait := 10*time.Second + time.Duration(rng.IntN(20000))*time.Millisecond
		if time.Now().Add(wait).After(end) {
			return
		}
		time.Sleep(wait)
		kind := kinds[rng.IntN(len(kinds))]
		n := s.c.nodes[rng.IntN(len(s.c.nodes))]
		where := n.name
		if kind == faultAPIStop || kind == faultEtcd {
			where = "control-plane"
		}
		s.mu.Lock()
		s.fault = &faultNow{kind: kind, node: where}
		s.lastKind, s.lastAt = kind, time.Now()
		s.faults[kind]++
		s.mu.Unlock()
		s.logf("fault %s on %s: start", kind, where)
		start := time.Now()
		err := s.inject(kind, n, rng)
		s.mu.Lock()
		s.fault = nil
		s.lastAt = time.Now()
		if kind == faultReboot || kind == faultAgentKill {
			s.unsettled[n.name] = s.lastAt
		}
		if kind == faultAPIStop || kind == faultEtcd {
			// An allowed prober whose new sandbox was not settled when
			// the API went away has not reached the other nodes' agents:
			// its clock starts again (seed 23: node-2's prober, new after
			// its reboot, denied by node-3 for 5.7 s of an API stop).
			for name, at := range s.unsettled {
				if start.Sub(at) < newPodBound {
					s.unsettled[name] = s.lastAt
				}
			}
		}
		for _, p := range s.pods {
			switch {
			case p.node != n.name:
			case kind == faultReboot:
				p.rebootedAt = s.lastAt
			case kind == faultAgentKill:
				// A pod that a policy could select, started while
				// its node's agent was down, is closed until the new
				// agent has placed it (docs/policy.md): fail closed.
				p.agentBackAt = s.lastAt
			}
		}
		s.mu.Unlock()
		if err != nil {
			s.breach("recovery", "%s on %s: %v", kind, where, err)
		}
		s.logf("fault %s on %s: done in %.1fs", kind, where, time.Since(start).Seconds())
	}
}

// inject does one fault and waits until what it stopped runs again.
func (s *soak) inject(kind string, n *node, rng *rand.Rand) error {
	switch kind {
	case faultAgentKill:
		return s.killAgent(n)
	case faultContainerd:
		d, err := s.daemon(n, "containerd")
		if err != nil {
			return err
		}
		if err := d.stop(syscall.SIGTERM); err != nil {
			return err
		}
		return s.startDaemon(n, d, "ctr", "--address", filepath.Join(n.dir, "containerd.sock"), "version")
	case faultAPIStop:
		d, err := s.daemon(s.c.node, "kube-apiserver")
		if err != nil {
			return err
		}
		pause := 5*time.Second + time.Duration(rng.IntN(15000))*time.Millisecond
		syscall.Kill(d.pid, syscall.SIGSTOP)
		s.logf("fault %s: stopped for %v", kind, pause)
		time.Sleep(pause)
		return syscall.Kill(d.pid, syscall.SIGCONT)
	case faultEtcd:
		d, err := s.daemon(s.c.node, "etcd")
		if err != nil {
			return err
		}
		if err := d.stop(syscall.SIGKILL); err != nil {
			return err
		}
		time.Sleep(time.Duration(1000+rng.IntN(4000)) * time.Millisecond)
		return s.startDaemon(s.c.node, d, filepath.Join(s.c.kubeBin, "kubectl"), "--kubeconfig", s.c.kubeconfig, "get", "--raw", "/readyz")
	case faultReboot:
		return s.reboot(n)
	}
	return fmt.Errorf("unknown fault %q (want one of %v)", kind, faultKinds)
}

// killAgent sends SIGKILL to the node's agent and waits for the kubelet to
// start it again.
func (s *soak) killAgent(n *node) error {
	old := s.agents(n)
	if len(old) == 0 {
		return fmt.Errorf("no cnibox-agent on %s", n.name)
	}
	for _, p := range old {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	return s.waitAgent(n, old)
}

// waitAgent waits until node n has an agent that is none of old.
func (s *soak) waitAgent(n *node, old []proc) error {
	deadline := time.Now().Add(recoverWait)
	for time.Now().Before(deadline) {
		for _, p := range s.agents(n) {
			if !slices.ContainsFunc(old, func(o proc) bool { return o.pid == p.pid }) {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("no new cnibox-agent on %s after %v", n.name, recoverWait)
}

// daemonProc is a daemon of a node (or of the control plane) as it was
// started: what it takes to start it again the same way.
type daemonProc struct {
	pid  int
	argv []string
	env  []string
	cwd  string
	out  string // its stdout, as the node sees the path
}

// daemon finds the daemon named name (its argv[0]'s base) in n's PID
// namespace.
func (s *soak) daemon(n *node, name string) (daemonProc, error) {
	found := procs(func(pid int, argv []string) bool {
		return filepath.Base(argv[0]) == name && nsOf(pid, "pid") == n.pidNS
	})
	if len(found) != 1 {
		return daemonProc{}, fmt.Errorf("%d processes %s in %s's namespaces", len(found), name, n.dir)
	}
	p := found[0]
	d := daemonProc{pid: p.pid, argv: p.argv}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
	if err != nil {
		return d, err
	}
	d.env = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	d.cwd, _ = os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.pid))
	d.out, _ = os.Readlink(fmt.Sprintf("/proc/%d/fd/1", p.pid))
	return d, nil
}

// stop sends sig and waits until the process is gone.
func (d daemonProc) stop(sig syscall.Signal) error {
	syscall.Kill(d.pid, sig)
	return waitGone(d.pid)
}

// waitGone waits until pid has exited (and been reaped).
func waitGone(pid int) error {
	for i := 0; i < 600; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return nil
		}
		if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if f := strings.Fields(string(raw)); len(f) > 2 && f[2] == "Z" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("process %d still there after 60 s", pid)
}

// startDaemon starts d again in n's namespaces (network, mount, PID, UTS),
// its output appended to the file it wrote to, and waits until ready (a
// command run in n's network and mount namespaces) succeeds. A daemon that
// exits before it is ready is started again a second later, as systemd's
// Restart= does for the units of a real node: the kubelet exits at once
// when containerd's CRI service is not serving yet, which containerd's
// own socket answering (the ready check of containerd) does not promise
// (seed 17: two reboots whose kubelet never came back).
func (s *soak) startDaemon(n *node, d daemonProc, ready ...string) error {
	out := d.out
	if out == "" || strings.HasPrefix(out, "pipe:") || strings.HasPrefix(out, "socket:") {
		out = "/dev/null"
	}
	args := []string{"-t", strconv.Itoa(n.init), "-n", "-m", "-p", "-u", "--wd=" + d.cwd, "--", "sh", "-c", `exec "$@" >>"$0" 2>&1`, out}
	start := func() (<-chan struct{}, error) {
		cmd := exec.Command("nsenter", append(args, d.argv...)...)
		cmd.Env = d.env
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		return exited, nil
	}
	exited, err := start()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(recoverWait)
	for {
		_, err := n.onNode(ready...)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v", d.argv[0], recoverWait, err)
		}
		select {
		case <-exited:
			s.logf("%s: %s exited before it was ready; starting it again", n.name, filepath.Base(d.argv[0]))
			time.Sleep(time.Second)
			if exited, err = start(); err != nil {
				return err
			}
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// reboot is a node's power cycle: the kubelet, kube-proxy, containerd and
// every container (the shims and what runs under them, the agent
// included) killed; the pod interfaces, the nftables tables and /run
// (pod namespaces, runc's state, subnet.env, the agent's socket) wiped; a
// new boot ID; then containerd, the kubelet and kube-proxy started again
// as node.sh started them. The disk (/var/lib: the store) stays.
func (s *soak) reboot(n *node) error {
	var ds []daemonProc
	for _, name := range []string{"containerd", "kubelet", "kube-proxy"} {
		d, err := s.daemon(n, name)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	oldAgents := s.agents(n)
	for _, d := range ds {
		syscall.Kill(d.pid, syscall.SIGKILL)
	}
	shims := procs(func(pid int, argv []string) bool {
		return strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, filepath.Join(n.dir, "containerd.sock"))
	})
	var all []int
	for _, sh := range shims {
		all = append(all, descendants(sh.pid)...)
		all = append(all, sh.pid)
	}
	for _, pid := range all {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range append(all, ds[0].pid, ds[1].pid, ds[2].pid) {
		if err := waitGone(pid); err != nil {
			return err
		}
	}
	if err := s.wipe(n); err != nil {
		return err
	}
	if out, err := exec.Command("bash", "../kube/node.sh", "cleanup", n.dir).CombinedOutput(); err != nil {
		s.logf("reboot %s: node.sh cleanup: %v %s", n.name, err, out)
	}
	if err := s.startDaemon(n, ds[0], "ctr", "--address", filepath.Join(n.dir, "containerd.sock"), "version"); err != nil {
		return err
	}
	if err := s.startDaemon(n, ds[1], "curl", "-sf", "http://127.0.0.1:10248/healthz"); err != nil {
		return err
	}
	if err := s.startDaemon(n, ds[2], "curl", "-s", "http://127.0.0.1:10256/healthz"); err != nil {
		return err
	}
	if _, err := s.c.kubectl("wait", "--for=condition=Ready", "node/"+n.name, "--timeout="+recoverWait.String()); err != nil {
		return err
	}
	return s.waitAgent(n, oldAgents)
}

// wipe removes what a power cycle takes from the node: every link but lo
// and eth0 (the pod veths, cni0, flannel.1, br-soak), every nftables
// table, everything under /run (the pod namespaces' mounts first), and
// gives it a new boot ID (a file bound over the kernel's in the node's own
// /proc, as node.sh shadows sysctls).
func (s *soak) wipe(n *node) error {
	out, err := n.onNode("ip", "-j", "link", "show")
	if err != nil {
		return err
	}
	var links []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return err
	}
	for _, l := range links {
		if l.Name != "lo" && l.Name != "eth0" {
			n.onNode("ip", "link", "del", l.Name) // a veth's peer may have gone with it
		}
	}
	if _, err := n.onNode("nft", "flush", "ruleset"); err != nil {
		return err
	}
	// In the node's PID namespace too: its procfs is that namespace's, so
	// without it /proc/self names no process there, and umount (libmount
	// reads /proc/self/mountinfo) left every mount under /run, the pods'
	// namespaces among them, in place: the reclaim after a reboot then
	// rightly kept their records (the leaks of seeds 11, 19 and 23).
	script := `awk '$5 ~ "^/run/" {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
rm -rf /run/* /run/.[!.]* 2>/dev/null || true
left=$(awk '$5 ~ "^/run/netns/" {print $5}' /proc/self/mountinfo); if [ -n "$left" ]; then echo "namespaces still mounted: $left"; exit 1; fi`
	if out, err := run(exec.Command("nsenter", "-t", strconv.Itoa(n.init), "-n", "-m", "-p", "sh", "-c", script), ""); err != nil {
		return fmt.Errorf("wipe /run: %v %s", err, out)
	}
	id := make([]byte, 16)
	crand.Read(id)
	f := filepath.Join(n.dir, "boot_id")
	if err := os.WriteFile(f, fmt.Appendf(nil, "%x-%x-%x-%x-%x\n", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]), 0o444); err != nil {
		return err
	}
	if out, err := n.onNode("mount", "--bind", f, "/proc/sys/kernel/random/boot_id"); err != nil {
		return fmt.Errorf("new boot ID: %v %s", err, out)
	}
	return nil
}

// descendants are pid's children, theirs, and so on.
func descendants(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, c := range strings.Fields(string(raw)) {
			if cp, err := strconv.Atoi(c); err == nil {
				out = append(out, cp)
				out = append(out, descendants(cp)...)
			}
		}
	}
	return out
}
