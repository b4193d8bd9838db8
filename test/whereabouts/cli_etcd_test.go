package whereabouts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/netops"
)

// childPID finds the test's own child process whose command line holds
// every one of args (an agent by its socket, etcd by its URL); the
// helpers that start them keep the process to themselves.
func childPID(t *testing.T, args ...string) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		ok := true
		for _, a := range args {
			ok = ok && bytes.Contains(cmdline, []byte("\x00"+a+"\x00"))
		}
		if ok {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	t.Fatalf("no child process runs with %q", args)
	return 0
}

// kill9 kills the test's child process run with args (SIGKILL: nothing is
// cleaned up, as when a node loses power).
func kill9(t *testing.T, args ...string) {
	t.Helper()
	if err := syscall.Kill(childPID(t, args...), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// doctorCheck runs cnibox doctor --json with args and returns its exit
// code and its "cluster IPAM" results (the other checks are of the node's
// bridges and stores, which this test has none of).
func doctorCheck(t *testing.T, cnibox string, args ...string) (int, []map[string]string) {
	t.Helper()
	// This test's namespace stands for the node's (TestMain), not PID 1's;
	// handed over as a descriptor (a /proc/PID path names another process
	// where the test runs in a PID namespace of its own).
	runtime.LockOSThread() // this thread's namespace (the process's first thread may be elsewhere)
	ns, err := os.Open("/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cmd := exec.Command(cnibox, append([]string{"doctor", "--json", "--node-netns", "/proc/self/fd/3"}, args...)...)
	cmd.ExtraFiles = []*os.File{ns}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var all []map[string]string
	if err := json.Unmarshal(out, &all); err != nil {
		t.Fatalf("cnibox doctor --json (exit %d): %v\n%s\n%s", code, err, out, stderr.String())
	}
	var ipam []map[string]string
	for _, r := range all {
		if r["check"] == "cluster IPAM" {
			ipam = append(ipam, r)
		} else if r["status"] != "pass" {
			t.Errorf("cnibox doctor: a check other than the cluster IPAM's did not pass: %v", r)
		}
	}
	return code, ipam
}

// What a user reads of the cluster pools on a node whose agent serves them
// (on etcd): cnibox inspect cluster-ipam lists the pool with each address,
// its pod, container and interface (--json and the table), and cnibox
// doctor passes the cluster IPAM with the pool and address count; doctor
// fails (exit 1) when the agent is stopped while a network of the config
// directory uses whereabouts (no socket: every ADD fails with 11), when
// etcd does not answer the agent, and when the agent died and left its
// socket behind; inspect says where the agent is missing.
func TestEtcdDoctorInspect(t *testing.T) {
	cnibox, agent := binaries(t)
	url := startEtcd(t)
	backend := []string{"--cluster-ipam-backend", "etcd", "--etcd-endpoints", url}
	host := startAgent(t, agent, "host1", "", backend...)
	confDir, binDir := t.TempDir(), t.TempDir()
	// The networks' master, eth0, on the node (the test's own namespace,
	// TestMain's), up: doctor checks that an ADD would find it.
	h, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.EnsureBridge(netops.BridgeOpts{Name: "eth0"}); err != nil {
		t.Fatal(err)
	}
	defer h.DeleteLink("eth0")
	for _, role := range []string{"macvlan", "whereabouts"} {
		if err := os.Symlink(cnibox, filepath.Join(binDir, role)); err != nil {
			t.Fatal(err)
		}
	}
	const rng, pool = "192.168.110.0/24", "lan-192.168.110.0-24"
	plugin := `{"type":"macvlan","master":"eth0","ipam":{"type":"whereabouts","range":"` + rng + `","network_name":"lan","agentSocket":"` + host.socket + `"}}`
	conflist := `{"cniVersion":"1.0.0","name":"lan","plugins":[` + plugin + `]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-lan.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	doctorArgs := []string{"--conf-dir", confDir, "--bin-dir", binDir, "--data-dir", t.TempDir(), "--cache-dir", t.TempDir(), "--agent-socket", host.socket}

	// Three pods get addresses.
	wb := cniboxPlugin(t, cnibox)
	conf := `{"cniVersion":"1.0.0","name":"lan",` + plugin[1:]
	var want []agentapi.IPAMAllocation
	for i := 0; i < 3; i++ {
		cid, pod := fmt.Sprintf("c%d", i), fmt.Sprintf("default/p%d", i)
		out, err := wb.call(t.Context(), "ADD", cid, pod, conf, "CNIBOX_DATA_DIR="+host.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, agentapi.IPAMAllocation{IP: firstIP(t, out), ContainerID: cid, PodRef: pod, IfName: "net1"})
	}
	slices.SortFunc(want, func(a, b agentapi.IPAMAllocation) int { return strings.Compare(a.IP, b.IP) })

	// inspect --json: the pool, its range, each address with its holder.
	out, err := exec.Command(cnibox, "inspect", "cluster-ipam", "--agent-socket", host.socket, "--json").Output()
	if err != nil {
		t.Fatalf("cnibox inspect cluster-ipam --json: %v", err)
	}
	var pools []agentapi.IPAMPool
	if err := json.Unmarshal(out, &pools); err != nil {
		t.Fatalf("cnibox inspect cluster-ipam --json: %v\n%s", err, out)
	}
	if len(pools) != 1 || pools[0].Kind != "IPPool" || pools[0].Name != pool || pools[0].Range != rng {
		t.Fatalf("cnibox inspect cluster-ipam --json: want the one IPPool %s of %s, got %s", pool, rng, out)
	}
	got := pools[0].Allocations
	slices.SortFunc(got, func(a, b agentapi.IPAMAllocation) int { return strings.Compare(a.IP, b.IP) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cnibox inspect cluster-ipam --json: allocations\n%+v\nwant\n%+v", got, want)
	}
	// The table: a row per address, with the pool, range, pod, container
	// and interface on it.
	out, err = exec.Command(cnibox, "inspect", "cluster-ipam", "--agent-socket", host.socket).Output()
	if err != nil {
		t.Fatalf("cnibox inspect cluster-ipam: %v", err)
	}
	for _, a := range want {
		row := regexp.MustCompile(`(?m)^IPPool +` + regexp.QuoteMeta(pool) + ` +` + regexp.QuoteMeta(rng) + ` +` + regexp.QuoteMeta(a.IP) +
			` +` + regexp.QuoteMeta(a.PodRef) + ` +` + a.ContainerID + ` +net1 *$`)
		if !row.Match(out) {
			t.Errorf("cnibox inspect cluster-ipam: no row for %s of %s:\n%s", a.IP, a.PodRef, out)
		}
	}

	// inspect ipam lists the pool beside the node's own ranges: its size
	// (a /24 less network and broadcast), the 3 held, each with its pod.
	out, err = exec.Command(cnibox, "inspect", "ipam", "--agent-socket", host.socket, "--conf-dir", confDir, "--data-dir", t.TempDir(), "--json").Output()
	if err != nil {
		t.Fatalf("cnibox inspect ipam --json: %v", err)
	}
	var nets []struct {
		Network string
		Pools   []struct {
			Range            string
			Size, Used, Free int
		}
		Reservations []struct{ Addr, ContainerID, IfName, Pod string }
	}
	if err := json.Unmarshal(out, &nets); err != nil {
		t.Fatalf("cnibox inspect ipam --json: %v\n%s", err, out)
	}
	found := false
	for _, n := range nets {
		if n.Network != pool {
			continue
		}
		found = true
		var held []agentapi.IPAMAllocation
		for _, r := range n.Reservations {
			held = append(held, agentapi.IPAMAllocation{IP: r.Addr, ContainerID: r.ContainerID, PodRef: r.Pod, IfName: r.IfName})
		}
		slices.SortFunc(held, func(a, b agentapi.IPAMAllocation) int { return strings.Compare(a.IP, b.IP) })
		if len(n.Pools) != 1 || n.Pools[0].Range != rng || n.Pools[0].Size != 254 || n.Pools[0].Used != 3 || n.Pools[0].Free != 251 || !reflect.DeepEqual(held, want) {
			t.Errorf("cnibox inspect ipam --json: the cluster pool %s is %s; want range %s, size 254, 3 used, 251 free, and %+v", pool, out, rng, want)
		}
	}
	if !found {
		t.Errorf("cnibox inspect ipam --json: no entry for the cluster pool %s:\n%s", pool, out)
	}

	// doctor: healthy.
	code, res := doctorCheck(t, cnibox, doctorArgs...)
	if code != 0 || len(res) != 1 || res[0]["status"] != "pass" || res[0]["detail"] != "1 IPPools, 3 addresses held (cnibox inspect cluster-ipam)" {
		t.Errorf("cnibox doctor with the agent and etcd up: exit %d, cluster IPAM %v; want exit 0 and a pass with 1 IPPool, 3 addresses", code, res)
	}

	// A second network names a socket where no agent listens: its ADDs
	// fail, whatever socket the pools are read from, so doctor fails.
	other := filepath.Join(confDir, "20-other.conflist")
	if err := os.WriteFile(other, []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"macvlan","master":"eth0","ipam":{"type":"whereabouts",`+
		`"range":"192.168.111.0/24","agentSocket":"/run/cnibox-no-such/agent.sock"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, res = doctorCheck(t, cnibox, doctorArgs...)
	if code != 1 || len(res) != 2 || res[0]["status"] != "fail" || !strings.Contains(res[0]["detail"], "network other uses the whereabouts IPAM") ||
		!strings.Contains(res[0]["detail"], "/run/cnibox-no-such/agent.sock") || res[1]["status"] != "pass" {
		t.Errorf("cnibox doctor with a network whose agentSocket has no agent: exit %d, cluster IPAM %v; want exit 1, a fail naming network other and its socket, and the pools' pass", code, res)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}

	// The agent is stopped (it removes its socket): the network's ADDs
	// would fail, so doctor fails; inspect says there is no agent.
	host.stop()
	code, res = doctorCheck(t, cnibox, doctorArgs...)
	if code != 1 || len(res) != 1 || res[0]["status"] != "fail" || !strings.Contains(res[0]["detail"], "network lan uses the whereabouts IPAM") ||
		!strings.Contains(res[0]["detail"], host.socket) || !strings.Contains(res[0]["fix"], "--cluster-ipam") {
		t.Errorf("cnibox doctor with the agent stopped: exit %d, cluster IPAM %v; want exit 1 and a fail naming network lan, %s and --cluster-ipam", code, res, host.socket)
	}
	out, err = exec.Command(cnibox, "inspect", "cluster-ipam", "--agent-socket", host.socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no cnibox-agent socket at "+host.socket) {
		t.Errorf("cnibox inspect cluster-ipam with the agent stopped: %v\n%s", err, out)
	}

	// Back: healthy again.
	host = startAgent(t, agent, "host1", filepath.Dir(host.socket), backend...)
	if code, res = doctorCheck(t, cnibox, doctorArgs...); code != 0 || len(res) != 1 || res[0]["status"] != "pass" {
		t.Errorf("cnibox doctor with the agent back: exit %d, cluster IPAM %v; want exit 0 and a pass", code, res)
	}

	// etcd is gone: the agent cannot read the pools.
	kill9(t, "--listen-client-urls", url)
	code, res = doctorCheck(t, cnibox, doctorArgs...)
	if code != 1 || len(res) != 1 || res[0]["status"] != "fail" || !strings.Contains(res[0]["detail"], "cnibox-agent cannot read the cluster pools") {
		t.Errorf("cnibox doctor with etcd down: exit %d, cluster IPAM %v; want exit 1 and a fail: the agent cannot read the pools", code, res)
	}

	// The agent dies (SIGKILL) and leaves its socket: nobody answers.
	kill9(t, "--socket", host.socket)
	if _, err := os.Stat(host.socket); err != nil {
		t.Fatalf("the killed agent's socket: %v", err)
	}
	code, res = doctorCheck(t, cnibox, doctorArgs...)
	if code != 1 || len(res) != 1 || res[0]["status"] != "fail" || !strings.Contains(res[0]["detail"], "cnibox-agent cannot read the cluster pools") {
		t.Errorf("cnibox doctor with the agent killed: exit %d, cluster IPAM %v; want exit 1 and a fail: the agent cannot read the pools", code, res)
	}
}
