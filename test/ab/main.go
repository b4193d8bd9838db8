// Command ab compares builds of cnibox with each other: the same conflist
// through libcni against each build, call by call in turn (A B A B ...), in a
// private network namespace, and prints the median and mean of ADD and DEL per
// build; with -exec, the median time and minor page faults of a VERSION call.
// make bench compares cnibox with the reference plugins; ab is for telling
// whether a change to cnibox made it faster.
//
// Each call carries the pod arguments a kubelet passes in CNI_ARGS
// (IgnoreUnknown, K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID,
// K8S_POD_UID; -pod-args=false: none, as a plain runtime), and -table says
// whether the node has cnibox-agent's policy table: none (no agent, or its
// policy off), agent (the table of an agent with no policy: every ADD records
// its pod in the attached set) or guarded (a policy could select the pods'
// namespace: every ADD also marks its pod pending). The table is made with
// netops/nft's ApplyPolicy, the agent's own call, in the node namespace.
//
//	go build -o /tmp/a/cnibox .   # before the change
//	go build -o /tmp/b/cnibox .   # after
//	go run ./test/ab -case chain /tmp/a/cnibox /tmp/b/cnibox
//
// Run it as root. Everything it makes (the node namespace, pod namespaces,
// plugin dirs, store, log) is removed when it ends.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

const privateEnv = "CNIBOX_AB_PRIVATE"

var conflists = map[string]string{
	"bridge": `{"cniVersion":"1.0.0","name":"ab","plugins":[
		{"type":"bridge","bridge":"ab0","isGateway":true,"ipMasq":true,
		 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`,
	"chain": `{"cniVersion":"1.0.0","name":"ab","plugins":[
		{"type":"bridge","bridge":"ab0","isGateway":true,"ipMasq":true,
		 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
		{"type":"portmap","capabilities":{"portMappings":true}},
		{"type":"tuning","sysctl":{"net.core.somaxconn":"512"}}]}`,
	// what `podman network create` writes (podman 4.3's CNI backend), as in
	// make bench's podman case.
	"podman": `{"cniVersion":"0.4.0","name":"ab","plugins":[
		{"type":"bridge","bridge":"ab0","isGateway":true,"ipMasq":true,"hairpinMode":true,"capabilities":{"ips":true},
		 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/16","gateway":"10.99.0.1"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
		{"type":"portmap","capabilities":{"portMappings":true}},
		{"type":"firewall","backend":""},
		{"type":"tuning"}]}`,
}

var roles = []string{"bridge", "host-local", "portmap", "firewall", "tuning", "loopback"}

func main() {
	n := flag.Int("n", 40, "pods per build and round")
	rounds := flag.Int("r", 3, "rounds")
	kase := flag.String("case", "bridge", "conflist: bridge (bridge+host-local), chain (+portmap+tuning) or podman (+portmap+firewall+tuning, cniVersion 0.4.0)")
	execN := flag.Int("exec", 0, "instead: this many VERSION execs per build")
	podArgs := flag.Bool("pod-args", true, "pass the pod arguments a kubelet passes in CNI_ARGS")
	table := flag.String("table", "none", "the node's policy table: none, agent (no policy) or guarded (a policy could select the pods)")
	flag.Parse()
	bins := flag.Args()
	if len(bins) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ab [-case bridge|chain|podman] [-n pods] [-r rounds] [-pod-args=false] [-table none|agent|guarded] [-exec N] BINARY BINARY...")
		os.Exit(2)
	}
	if _, ok := conflists[*kase]; !ok {
		fmt.Fprintf(os.Stderr, "ab: -case %q: want bridge, chain or podman\n", *kase)
		os.Exit(2)
	}
	if _, ok := tableGuards[*table]; !ok {
		fmt.Fprintf(os.Stderr, "ab: -table %q: want none, agent or guarded\n", *table)
		os.Exit(2)
	}
	if os.Getenv(privateEnv) == "" {
		os.Exit(reexec())
	}
	tmp, err := os.MkdirTemp("", "cnibox-ab-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	dirs := make([]string, len(bins))
	for i, bin := range bins {
		if dirs[i], err = pluginDir(tmp, i, bin); err != nil {
			fail(err)
		}
	}
	if *execN > 0 {
		execMode(bins, dirs, *execN)
		return
	}
	if err := policyTable(*table); err != nil {
		fail(err)
	}
	if err := cniMode(tmp, bins, dirs, conflists[*kase], *n, *rounds, *podArgs); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ab:", err)
	os.Exit(1)
}

// reexec runs this program again in a new network namespace (the node).
func reexec() int {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ab: re-exec in a private network namespace:", err)
		return 1
	}
	return 0
}

// pluginDir copies bin (a fresh copy: the page cache of an old file can make
// it slower to start) and links the roles to it.
func pluginDir(tmp string, i int, bin string) (string, error) {
	dir := filepath.Join(tmp, fmt.Sprintf("build%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "cnibox"), b, 0o755); err != nil {
		return "", err
	}
	for _, r := range roles {
		if err := os.Symlink("cnibox", filepath.Join(dir, r)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// podNamespace is the Kubernetes namespace of ab's pods.
const podNamespace = "ab"

// tableGuards are -table's values and the guard each table has (nil: no
// table).
var tableGuards = map[string]*nft.PolicyGuard{
	"none":    nil,
	"agent":   {},
	"guarded": {Namespaces: []string{podNamespace}},
}

// policyTable makes the node's policy table as cnibox-agent's first full
// sync does (a model without policies: the node's addresses and no rule
// but theirs), with the guard -table names.
func policyTable(table string) error {
	g := tableGuards[table]
	if g == nil {
		return nil
	}
	h, err := nft.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	node := netip.MustParseAddr("10.99.0.1") // the bridge's address (isGateway)
	return h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: &policymodel.Rules{NodeAddrs: "node"},
		Sets:  []*policymodel.Set{policymodel.NewSet("node", policymodel.Addrs, "", policymodel.AddrElem(node))},
		Guard: g})
}

// kubeletArgs are the CNI_ARGS a kubelet (through its runtime) passes for
// pod i of build v.
func kubeletArgs(v, i int, containerID string) [][2]string {
	name := fmt.Sprintf("pod-%d-%d", v, i)
	uid := fmt.Sprintf("%08x-ab00-4000-8000-%012x", os.Getpid(), v<<16|i)
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", podNamespace},
		{"K8S_POD_NAME", name},
		{"K8S_POD_INFRA_CONTAINER_ID", containerID},
		{"K8S_POD_UID", uid},
	}
}

func cniMode(tmp string, bins, dirs []string, conf string, n, rounds int, podArgs bool) error {
	h, err := netops.Open("")
	if err == nil {
		err = h.SetLinkUp("lo")
		h.Close()
	}
	if err != nil {
		return err
	}
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		return err
	}
	os.Setenv("CNIBOX_DATA_DIR", filepath.Join(tmp, "store"))
	// No agent answers: a guarded ADD's admission call finds no socket.
	os.Setenv("CNIBOX_AGENT_SOCKET", filepath.Join(tmp, "agent.sock"))
	if os.Getenv("CNIBOX_LOG_FILE") == "" { // set: kept, for the calls' steps
		os.Setenv("CNIBOX_LOG_FILE", filepath.Join(tmp, "cnibox.log"))
	}
	cns := make([]*libcni.CNIConfig, len(dirs))
	pods := make([][]*libcni.RuntimeConf, len(dirs))
	for v, dir := range dirs {
		cns[v] = libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(tmp, "cache"), nil)
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("cnibox-ab-%d-%d-%d", os.Getpid(), v, i)
			path, err := netops.CreateNamedNS(name)
			if err != nil {
				return err
			}
			defer netops.DeleteNamedNS(name)
			rt := &libcni.RuntimeConf{
				ContainerID: fmt.Sprintf("ab%d-%d", v, i), NetNS: path, IfName: "eth0",
				CapabilityArgs: map[string]any{"portMappings": []map[string]any{
					{"hostPort": 20000 + v*n + i, "containerPort": 80, "protocol": "tcp"}}},
			}
			if podArgs {
				rt.Args = kubeletArgs(v, i, rt.ContainerID)
			}
			pods[v] = append(pods[v], rt)
		}
	}
	adds := make([][]time.Duration, len(dirs))
	dels := make([][]time.Duration, len(dirs))
	ctx := context.Background()
	for r := 0; r < rounds; r++ {
		for i := 0; i < n; i++ {
			for k := range dirs {
				v := (k + i + r) % len(dirs) // who goes first changes
				t := time.Now()
				if _, err := cns[v].AddNetworkList(ctx, list, pods[v][i]); err != nil {
					return fmt.Errorf("%s: ADD: %w", bins[v], err)
				}
				adds[v] = append(adds[v], time.Since(t))
			}
		}
		for i := 0; i < n; i++ {
			for k := range dirs {
				v := (k + i + r) % len(dirs)
				t := time.Now()
				if err := cns[v].DelNetworkList(ctx, list, pods[v][i]); err != nil {
					return fmt.Errorf("%s: DEL: %w", bins[v], err)
				}
				dels[v] = append(dels[v], time.Since(t))
			}
		}
	}
	for v, bin := range bins {
		fmt.Printf("%c %-38s ADD p50 %6.2f mean %6.2f ms   DEL p50 %6.2f mean %6.2f ms\n",
			'A'+v, bin, ms(median(adds[v])), ms(mean(adds[v])), ms(median(dels[v])), ms(mean(dels[v])))
	}
	return nil
}

func execMode(bins, dirs []string, n int) {
	ts := make([][]time.Duration, len(dirs))
	faults := make([][]time.Duration, len(dirs))
	for i := 0; i < n; i++ {
		for k := range dirs {
			v := (k + i) % len(dirs)
			c := exec.Command(filepath.Join(dirs[v], "bridge"))
			c.Env = []string{"CNI_COMMAND=VERSION", "CNIBOX_LOG_FILE=off"}
			c.Stdin = bytes.NewReader([]byte(`{"cniVersion":"1.0.0"}`))
			t := time.Now()
			if out, err := c.CombinedOutput(); err != nil {
				fail(fmt.Errorf("%s VERSION: %w: %s", bins[v], err, out))
			}
			ts[v] = append(ts[v], time.Since(t))
			faults[v] = append(faults[v], time.Duration(c.ProcessState.SysUsage().(*syscall.Rusage).Minflt))
		}
	}
	for v, bin := range bins {
		fmt.Printf("%c %-38s VERSION p50 %6.3f ms   minor faults p50 %d\n", 'A'+v, bin, ms(median(ts[v])), int64(median(faults[v])))
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
