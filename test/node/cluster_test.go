//go:build kube

package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/testenv"
)

const (
	nodeName = "cnibox-node"
	nodeIP   = "172.31.250.2"
	apiPort  = "16443" // control-plane.sh's
	// busyboxRef is the test's pod image, also the sandbox image.
	busyboxRef = "localhost/cnibox-test/busybox:1"
	// waitLong bounds every wait for the cluster: generous, for a loaded
	// 2-core machine (and cut to the test's deadline: see node.wait).
	waitLong = 5 * time.Minute
	// cleanupTime is kept from go test's -timeout for the cleanup, which a
	// timed-out test binary would not run.
	cleanupTime = 2 * time.Minute
)

// node is the one-node cluster test/kube/node.sh runs.
type node struct {
	t          *testing.T
	dir        string
	kubeBin    string
	cmd        *exec.Cmd     // unshare; SIGKILL ends the node
	done       chan struct{} // closed when cmd has exited
	init       int           // the namespace's first process, as the host sees it
	pidNS      string        // its PID namespace, to find stragglers
	kubeconfig string
	deadline   time.Time // no wait goes past it
	// api is where kubectl runs: the node itself (node.sh run, the API
	// server on its loopback) or the cluster's control plane.
	api     *node
	stopped bool // stop ran
	// name and ip are the kubelet's node name and address (cluster nodes).
	name, ip string
}

// wait is how long the next wait may take: waitLong, or less near the
// deadline.
func (n *node) wait() time.Duration {
	return max(time.Second, min(waitLong, time.Until(n.deadline)))
}

// timeout is kubectl's --timeout for the next wait.
func (n *node) timeout() string { return "--timeout=" + n.wait().String() }

// env returns the value of the environment variable the Makefile sets, or
// fails the test.
func env(t *testing.T, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("$%s is not set: %s (make test-node sets it)", name, what)
	}
	return v
}

// startNode starts the node and waits for its kubelet. Its cleanup kills
// every process of the node and removes what outlives the namespaces; on
// failure it first logs what a person debugging needs.
func startNode(t *testing.T) *node {
	kubeBin := kubeBinaries(t)
	n := launch(t, t.TempDir(), kubeBin, "run", "NODE_NAME="+nodeName, "NODE_IP="+nodeIP)
	n.kubeconfig = filepath.Join(n.dir, "cp", "kubeconfig")
	t.Cleanup(n.diagnose)
	return n
}

// kubeBinaries is the directory of the Kubernetes binaries ($CNIBOX_KUBE_BIN);
// it skips the test unless it runs as root.
func kubeBinaries(t *testing.T) string {
	t.Helper()
	if !testenv.Root() {
		t.Skip("the real-node test runs as root (namespaces, mounts, containerd)")
	}
	kubeBin := env(t, "CNIBOX_KUBE_BIN", "the directory of kubelet, kube-scheduler and kubectl")
	for _, b := range []string{"kubelet", "kube-scheduler", "kubectl", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(kubeBin, b)); err != nil {
			t.Fatalf("%v: build it with test/kube/control-plane.sh build kube-scheduler kubelet kubectl", err)
		}
	}
	return kubeBin
}

// launch runs `node.sh MODE DIR` with env added and waits for DIR/up; the
// node's stop is registered as a cleanup (the caller registers what to log
// on failure, to run before it).
func launch(t *testing.T, dir, kubeBin, mode string, env ...string) *node {
	t.Helper()
	n := &node{t: t, dir: dir, kubeBin: kubeBin, deadline: time.Now().Add(time.Hour)}
	n.api = n
	if d, ok := t.Deadline(); ok {
		n.deadline = d.Add(-cleanupTime)
	}
	out, err := os.Create(filepath.Join(n.dir, "node.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	n.cmd = exec.Command("bash", "../kube/node.sh", mode, n.dir)
	n.cmd.Env = append(os.Environ(), append([]string{"KUBE_BIN=" + n.kubeBin, "SANDBOX_IMAGE=" + busyboxRef}, env...)...)
	n.cmd.Stdout, n.cmd.Stderr = out, out
	// If the test binary dies, so does the node. The kernel sends the
	// death signal when the thread that started the child ends: start it
	// from a thread of its own that lives until the node has ended.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.done = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := n.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		n.cmd.Wait()
		close(n.done)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)

	wait := n.wait()
	deadline := time.Now().Add(wait)
	for {
		if _, err := os.Stat(filepath.Join(n.dir, "up")); err == nil {
			break
		}
		select {
		case <-n.done:
			t.Fatalf("node.sh %s ended before it was up: %v", mode, n.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node.sh %s is not up after %v", mode, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pid := n.cmd.Process.Pid
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil || len(strings.Fields(string(children))) == 0 {
		t.Fatalf("the node's init process (child of unshare %d): %q %v", pid, children, err)
	}
	if n.init, err = strconv.Atoi(strings.Fields(string(children))[0]); err != nil {
		t.Fatal(err)
	}
	if n.pidNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n.init)); err != nil {
		t.Fatal(err)
	}
	return n
}

// stop kills the node (SIGKILL to unshare: its child, the namespace's
// init, gets SIGKILL, and the kernel kills the rest of the namespace),
// waits until no process of the namespace is left, and removes the
// containers' cgroups. The mounts and namespaces go with the processes.
func (n *node) stop() {
	t := n.t
	select {
	case <-n.done:
		if n.stopped {
			return
		}
	default:
	}
	n.stopped = true
	n.cmd.Process.Kill()
	<-n.done
	if n.pidNS != "" {
		deadline := time.Now().Add(time.Minute)
		for left := n.namespaceProcs(); len(left) > 0; left = n.namespaceProcs() {
			if time.Now().After(deadline) {
				t.Errorf("processes of the node's PID namespace are left after a minute: %v", left)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if out, err := exec.Command("bash", "../kube/node.sh", "cleanup", n.dir).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("node.sh cleanup: %v\n%s", err, out)
	}
}

// namespaceProcs lists the processes still in the node's PID namespace.
func (n *node) namespaceProcs() []string {
	ents, _ := os.ReadDir("/proc")
	var left []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && ns == n.pidNS {
			left = append(left, e.Name())
		}
	}
	return left
}

// diagnose logs, when the test failed, what the node says: the pods, the
// events, the agent's log and the tails of the daemons' logs.
func (n *node) diagnose() {
	t := n.t
	if !t.Failed() {
		return
	}
	if n.init != 0 && n.api == n {
		for _, args := range [][]string{
			{"get", "nodes,pods", "-A", "-o", "wide"},
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
			{"-n", "kube-system", "logs", "-l", "app=cnibox", "--all-containers", "--tail=50"},
		} {
			out, err := n.kubectl(args...)
			t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, f := range []string{"node.out", "kubelet.log", "containerd.log", "cp/apiserver.log", "cp/kcm.log", "scheduler.log"} {
		data, _ := os.ReadFile(filepath.Join(n.dir, f))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Logf("%s (last 40 lines):\n%s", f, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// kubectl runs kubectl in the node's network namespace (the API server
// listens on the node's loopback) and returns its stdout; an error carries
// stderr.
func (n *node) kubectl(args ...string) (string, error) {
	return n.kubectlIn("", args...)
}

// kubectlIn is kubectl with stdin.
func (n *node) kubectlIn(stdin string, args ...string) (string, error) {
	return run(n.kubectlCmd(args...), stdin)
}

// kubectlCmd is the command kubectl runs as: in the node's network
// namespace, with the cluster's kubeconfig and a cache of the test's (not
// ~/.kube).
func (n *node) kubectlCmd(args ...string) *exec.Cmd {
	a := n.api
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(a.init), "-n", filepath.Join(a.kubeBin, "kubectl"),
		"--kubeconfig", a.kubeconfig, "--cache-dir", filepath.Join(a.dir, "kubectl-cache")}, args...)...)
}

// must is kubectl that fails the test on an error.
func (n *node) must(args ...string) string {
	n.t.Helper()
	out, err := n.kubectl(args...)
	if err != nil {
		n.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// apply applies the manifest (YAML or JSON) given.
func (n *node) apply(manifest string) {
	n.t.Helper()
	if out, err := n.kubectlIn(manifest, "apply", "-f", "-"); err != nil {
		n.t.Fatalf("kubectl apply: %v\n%s", err, manifest)
	} else {
		n.t.Logf("kubectl apply: %s", strings.TrimSpace(out))
	}
}

// ctr runs ctr against the node's containerd, in the namespace of the CRI.
func (n *node) ctr(args ...string) string {
	n.t.Helper()
	out, err := run(exec.Command("ctr", append([]string{"--address", filepath.Join(n.dir, "containerd.sock"), "-n", "k8s.io"}, args...)...), "")
	if err != nil {
		n.t.Fatalf("ctr %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// onNode runs a command in the node's network and mount namespaces, as a
// person logged in on the node would.
func (n *node) onNode(args ...string) (string, error) {
	return run(exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.init), "-n", "-m"}, args...)...), "")
}

// nodeFile reads a file as the node sees it (its /run, /var/lib are its own).
func (n *node) nodeFile(path string) ([]byte, error) {
	return os.ReadFile(fmt.Sprintf("/proc/%d/root%s", n.init, path))
}

// hostDir is where the node's CNI host path p (/opt/cni/bin, /etc/cni/net.d)
// is: containerd reads its plugins and conflist there.
func (n *node) hostDir(p string) string { return filepath.Join(n.dir, "host", p) }

// run runs cmd with stdin and returns its stdout; an error carries stderr.
func run(cmd *exec.Cmd, stdin string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// poll calls check until it returns nil, every half second, for at most
// n.wait(); it fails the test with check's last error.
func (n *node) poll(what string, check func() error) {
	n.t.Helper()
	wait := n.wait()
	deadline := time.Now().Add(wait)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: not after %v: %v", what, wait, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
