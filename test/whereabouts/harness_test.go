package whereabouts

import (
	testbin "github.com/cnibox/cnibox/test/internal/binaries"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The whereabouts role end to end: the cnibox binary called as
// "whereabouts" (as a runtime or Multus execs it), cnibox-agent serving the
// cluster IPAM on a unix socket per simulated node, and the pools on a real
// etcd (etcd_test.go) or a real Kubernetes API server next to whereabouts'
// own binary (kube_test.go, make test-kube).

func TestMain(m *testing.M) {
	// What comes from outside is built here, in the machine's namespace:
	// whereabouts v0.9.4 (kube_test.go) from the module proxy.
	prepare()
	nstest.MainInPrivateNetns(m)
}

// binaries returns cnibox and the agent with the Kubernetes client:
// $CNIBOX_BIN and bin/cnibox-agent-kube next to it (make), else fresh
// builds.
func binaries(t *testing.T) (cnibox, agent string) {
	t.Helper()
	// The agents' sockets answer root only, and the CNI calls reach them.
	testenv.RequireRoot(t, "call the agents' root-only sockets")
	return testbin.CniboxAndAgent(t, "cnibox-agent-kube")
}

// node is one simulated node: its agent's socket and data directory.
type node struct {
	name, socket, dataDir string
	stop                  func()
}

// startAgent runs cnibox-agent --cluster-ipam-only for node name with the
// backend flags args, its socket and data in dir ("": a new one), and
// waits until it answers STATUS.
func startAgent(t *testing.T, agent, name, dir string, args ...string) *node {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	n := &node{name: name, socket: filepath.Join(dir, "agent.sock"), dataDir: filepath.Join(dir, "data")}
	var log bytes.Buffer
	cmd := exec.Command(agent, append([]string{"--cluster-ipam-only", "--node-name", name, "--socket", n.socket, "--data-dir", n.dataDir, "--log-level", "debug"}, args...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		n.stop()
		t.Logf("agent %s: %s", name, writeSummary(log.String()))
		if slow := grepLines(log.String(), `level=WARN msg="cluster IPAM: pool write"`); slow != "" {
			t.Logf("agent %s: its pool writes over 5 s:\n%s", name, tail(slow, 3000))
		}
		if t.Failed() {
			t.Logf("agent %s, its warnings:\n%s\nits last lines:\n%s", name, tail(grepLines(log.String(), "level=WARN", "level=ERROR"), 6000), tail(log.String(), 4000))
		}
	})
	c := &agentapi.Client{Socket: n.socket, Timeout: 2 * time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := c.IPAM(context.Background(), agentapi.OpIPAMStatus, &agentapi.IPAMRequest{Network: "probe"})
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s not ready: %v\n%s", name, err, tail(log.String(), 4000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// plugin is a CNI plugin binary to exec (cnibox as "whereabouts", or
// whereabouts' own).
type plugin struct {
	path  string
	argv0 string
	// quietDel: a DEL that fails exits 0 all the same: whereabouts
	// v0.9.4's cmdDel ignores what IPManagement returns (its leader
	// election's time limit, a pool update's last conflict), so under
	// contention it leaks the address and says so only in its debug log.
	// Such a DEL counts as failed unless that log (log_level debug, see
	// sideBySide) says it released the address or found none to release.
	quietDel bool
}

// call execs the plugin for one CNI call and returns stdout.
func (p plugin) call(ctx context.Context, cmd, cid, pod, conf string, extra ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, p.path)
	c.Args[0] = p.argv0
	ns, name, _ := strings.Cut(pod, "/")
	c.Env = append([]string{
		"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + cid, "CNI_NETNS=/var/run/netns/" + cid, "CNI_IFNAME=net1",
		"CNI_PATH=/nonexistent", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + name,
		"PATH=" + os.Getenv("PATH"), "CNIBOX_LOG_FILE=off",
	}, extra...)
	c.Stdin = strings.NewReader(conf)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("%s %s %s: %v: %s %s", p.argv0, cmd, cid, err, out.String(), tail(errb.String(), 2000))
	}
	if p.quietDel && cmd == "DEL" && grepLines(errb.String(), quietDelDone...) == "" {
		return nil, fmt.Errorf("%s DEL %s exited 0 without saying it released the address: %s", p.argv0, cid, tail(errb.String(), 2000))
	}
	return out.Bytes(), nil
}

// quietDelDone are the debug lines of whereabouts v0.9.4 that end a DEL
// that did its work: the reservation deleted after the pool's update, or
// no allocation of the container to release.
var quietDelDone = []string{"UpdateOverlappingRangeAllocation success on deallocate", "Failed to find allocation for container ID"}

// cnibox returns the cnibox binary called as "whereabouts" through a link.
func cniboxPlugin(t *testing.T, bin string) plugin {
	t.Helper()
	dir := t.TempDir()
	link := filepath.Join(dir, "whereabouts")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return plugin{path: link, argv0: link}
}

// firstIP returns the first address of an ADD result.
func firstIP(t *testing.T, out []byte) string {
	var r struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) == 0 {
		t.Errorf("ADD result %s: %v", out, err)
		return ""
	}
	ip, _, err := net.ParseCIDR(r.IPs[0].Address)
	if err != nil {
		t.Errorf("ADD result %s: %v", out, err)
		return ""
	}
	return ip.String()
}

// grepLines returns the lines of s that hold any of the words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

var writeLine = regexp.MustCompile(`msg="cluster IPAM: pool write" .*adds=(\d+) dels=(\d+) took=(\S+) attempts=(\d+)`)

// writeSummary sums up the agent's pool writes (its debug log): how many,
// the changes they carried, their attempts and the slowest.
func writeSummary(log string) string {
	var writes, ops, attempts int
	var slowest time.Duration
	for _, m := range writeLine.FindAllStringSubmatch(log, -1) {
		a, _ := strconv.Atoi(m[1])
		d, _ := strconv.Atoi(m[2])
		n, _ := strconv.Atoi(m[4])
		took, _ := time.ParseDuration(m[3])
		writes, ops, attempts = writes+1, ops+a+d, attempts+n
		slowest = max(slowest, took)
	}
	return fmt.Sprintf("%d pool writes carrying %d changes in %d attempts; the slowest took %s", writes, ops, attempts, slowest)
}
