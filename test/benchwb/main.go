// Command benchwb measures the whereabouts role's ADD against host-local's
// on the same machine and whereabouts v0.9.4's own binary on the same
// control plane (make bench): a real API server (test/kube/control-plane.sh)
// with whereabouts' CRDs from whereabouts-crds.yaml, three cnibox agents, pods added
// 16 at a time on each node, in a private network namespace. It prints the
// ADD latency per plugin (p50, p90, max), the time for all, and the
// duplicate addresses found (there must be none).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/test/internal/privnet"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

const privateEnv = "CNIBOX_BENCHWB_PRIVATE"

type options struct {
	cnibox, agent, kcp, manifest string
	perNode, conc, wbN           int
	slice                        string
}

func main() {
	var o options
	flag.StringVar(&o.cnibox, "cnibox", "bin/cnibox", "the cnibox binary")
	flag.StringVar(&o.agent, "agent", "bin/cnibox-agent-kube", "cnibox-agent with the Kubernetes client")
	flag.StringVar(&o.kcp, "kcp", "test/kube/control-plane.sh", "the control-plane script")
	flag.StringVar(&o.manifest, "manifest", "deploy/kubernetes/whereabouts-crds.yaml", "the file holding whereabouts' CRDs")
	flag.IntVar(&o.perNode, "n", 160, "ADDs per node (3 nodes)")
	flag.IntVar(&o.conc, "conc", 16, "ADDs at a time per node")
	flag.IntVar(&o.wbN, "wb-n", 48, "ADDs of whereabouts' own binary (it takes a cluster-wide lease per call)")
	flag.StringVar(&o.slice, "slice", "/24", "node_slice_size of the sliced cnibox case (a node has one slice: it must hold -n addresses)")
	flag.Parse()
	if os.Getenv(privateEnv) == "" {
		wb, err := upstream.Whereabouts() // from the module proxy: before the private namespace
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchwb:", err)
			os.Exit(1)
		}
		out, err := exec.Command("bash", o.kcp, "build").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchwb: build the control plane: %v\n%s", err, out)
			os.Exit(1)
		}
		os.Exit(privnet.Reexec("benchwb", privateEnv+"=1", "CNIBOX_BENCHWB_WHEREABOUTS="+wb))
	}
	if err := privnet.LoopbackUp(); err != nil {
		fmt.Fprintln(os.Stderr, "benchwb:", err)
		os.Exit(1)
	}
	if err := run(o, os.Getenv("CNIBOX_BENCHWB_WHEREABOUTS")); err != nil {
		fmt.Fprintln(os.Stderr, "benchwb:", err)
		os.Exit(1)
	}
}

// result is one case's measurements.
type result struct {
	name  string
	lat   []time.Duration
	total time.Duration
	dups  int
	fails int
}

func run(o options, wbBin string) error {
	for _, p := range []*string{&o.cnibox, &o.agent, &o.kcp, &o.manifest} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	dir, err := os.MkdirTemp("", "benchwb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kc, stop, err := controlPlane(o, dir)
	if err != nil {
		return err
	}
	defer stop()
	plug := filepath.Join(dir, "bin")
	os.MkdirAll(plug, 0o755)
	for _, r := range []string{"whereabouts", "host-local"} {
		if err := os.Symlink(o.cnibox, filepath.Join(plug, r)); err != nil {
			return err
		}
	}
	var socks []string
	for i := 1; i <= 3; i++ {
		s, stopAgent, err := agent(o, dir, fmt.Sprintf("node%d", i), kc)
		if err != nil {
			return err
		}
		defer stopAgent()
		socks = append(socks, s)
	}
	flat := filepath.Join(dir, "whereabouts.conf")
	os.WriteFile(flat, []byte(`{"datastore":"kubernetes","kubernetes":{"kubeconfig":"`+kc+`"}}`), 0o600)
	conf := func(ipam string) string {
		return `{"cniVersion":"0.3.1","name":"lan","type":"macvlan","master":"eth0","ipam":` + ipam + `}`
	}
	var results []result
	results = append(results, measure("host-local (cnibox)", o.perNode, o.conc, func(node, i int) (string, []string, string) {
		return filepath.Join(plug, "host-local"), []string{"CNIBOX_DATA_DIR=" + filepath.Join(dir, fmt.Sprintf("hl%d", node))},
			conf(fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.%d.0.0/16"}]]}`, 70+node))
	}))
	results = append(results, measure("whereabouts role (cnibox agents)", o.perNode, o.conc, func(node, i int) (string, []string, string) {
		return filepath.Join(plug, "whereabouts"), nil, conf(`{"type":"whereabouts","range":"10.80.0.0/20","agentSocket":"` + socks[node] + `"}`)
	}))
	results = append(results, measure("whereabouts role, node_slice_size "+o.slice, o.perNode, o.conc, func(node, i int) (string, []string, string) {
		return filepath.Join(plug, "whereabouts"), nil, conf(`{"type":"whereabouts","range":"10.81.0.0/20","node_slice_size":"` + o.slice + `","network_name":"sliced","agentSocket":"` + socks[node] + `"}`)
	}))
	results = append(results, measure("whereabouts v0.9.4", o.wbN/3, o.conc, func(node, i int) (string, []string, string) {
		return wbBin, nil, conf(`{"type":"whereabouts","range":"10.82.0.0/20","configuration_path":"` + flat + `"}`)
	}))
	fmt.Printf("\n%-40s %6s %10s %10s %10s %10s %5s %5s\n", "ADD (3 nodes, "+fmt.Sprint(o.conc)+" at a time each)", "n", "p50", "p90", "max", "all", "dup", "fail")
	for _, r := range results {
		sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
		q := func(f float64) time.Duration {
			if len(r.lat) == 0 {
				return 0
			}
			return r.lat[int(f*float64(len(r.lat)-1))]
		}
		fmt.Printf("%-40s %6d %10s %10s %10s %10s %5d %5d\n", r.name, len(r.lat), ms(q(0.5)), ms(q(0.9)), ms(q(1)), r.total.Round(time.Millisecond), r.dups, r.fails)
	}
	for i := 1; i <= 3; i++ {
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node%d.log", i)))
		fmt.Printf("agent node%d: %s\n", i, writeSummary(string(b)))
	}
	hl, wbr, wbo := results[0].lat, results[1].lat, results[3].lat
	if len(hl) > 0 && len(wbr) > 0 && len(wbo) > 0 {
		fmt.Printf("\nwhereabouts role p50 / host-local p50 = %.2f; / whereabouts v0.9.4 p50 = %.3f; sliced / host-local = %.2f\n",
			ratio(wbr, hl), ratio(wbr, wbo), ratio(results[2].lat, hl))
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func ratio(a, b []time.Duration) float64 { return float64(a[len(a)/2]) / float64(b[len(b)/2]) }

// measure runs perNode ADDs on each of 3 nodes, conc at a time per node;
// call returns the plugin, extra env and config of ADD i on node.
func measure(name string, perNode, conc int, call func(node, i int) (string, []string, string)) result {
	r := result{name: name}
	var mu sync.Mutex
	seen := map[string]bool{}
	start := time.Now()
	var wg sync.WaitGroup
	for node := 0; node < 3; node++ {
		ch := make(chan int)
		for w := 0; w < conc; w++ {
			wg.Add(1)
			go func(node int) {
				defer wg.Done()
				for i := range ch {
					bin, env, conf := call(node, i)
					cid := fmt.Sprintf("%s-n%d-%d", strings.Fields(name)[0], node, i)
					t0 := time.Now()
					ip, err := add(bin, env, cid, conf)
					d := time.Since(t0)
					mu.Lock()
					if err != nil {
						r.fails++
						if r.fails <= 3 {
							fmt.Fprintln(os.Stderr, name+":", err)
						}
					} else {
						r.lat = append(r.lat, d)
						if seen[ip] && !strings.HasPrefix(name, "host-local") {
							r.dups++
						}
						seen[ip] = true
					}
					mu.Unlock()
				}
			}(node)
		}
		go func() {
			for i := 0; i < perNode; i++ {
				ch <- i
			}
			close(ch)
		}()
	}
	wg.Wait()
	r.total = time.Since(start)
	return r
}

// add execs one ADD and returns the first address.
func add(bin string, env []string, cid, conf string) (string, error) {
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + cid, "CNI_NETNS=/var/run/netns/" + cid, "CNI_IFNAME=net1",
		"CNI_PATH=/nonexistent", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + cid, "CNIBOX_LOG_FILE=off",
		"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(conf)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s %s", err, out.String(), errb.String())
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res.IPs) == 0 {
		return "", fmt.Errorf("result %s: %v", out.String(), err)
	}
	ip, _, err := net.ParseCIDR(res.IPs[0].Address)
	if err != nil {
		return "", err
	}
	return ip.String(), nil
}

// controlPlane starts the control plane and installs whereabouts-crds.yaml's CRDs.
func controlPlane(o options, dir string) (kubeconfig string, stop func(), err error) {
	cp := filepath.Join(dir, "kcp")
	out, err := exec.Command("bash", o.kcp, "start", cp).CombinedOutput()
	stop = func() { exec.Command("bash", o.kcp, "stop", cp).Run() }
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("start the control plane: %v\n%s", err, out)
	}
	kc := filepath.Join(cp, "kubeconfig")
	m, err := os.ReadFile(o.manifest)
	if err != nil {
		stop()
		return "", nil, err
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(m), -1) {
		if !strings.Contains(doc, "kind: CustomResourceDefinition") {
			continue
		}
		f := filepath.Join(dir, "crd.yaml")
		os.WriteFile(f, []byte(doc), 0o600)
		// kubectl is not built for make bench: the API takes YAML.
		if err := postYAML(kc, f); err != nil {
			stop()
			return "", nil, err
		}
	}
	// The CRDs are served once established.
	for _, res := range []string{"ippools", "overlappingrangeipreservations", "nodeslicepools"} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := apiCall(kc, "GET", "/apis/whereabouts.cni.cncf.io/v1alpha1/namespaces/kube-system/"+res, "", nil, http.StatusOK)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				stop()
				return "", nil, fmt.Errorf("CRD %s not served after 60 s: %w", res, err)
			}
		}
	}
	return kc, stop, nil
}

// postYAML creates the CRD in f through the API.
func postYAML(kc, f string) error {
	body, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	if err := apiCall(kc, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/yaml", body, http.StatusCreated); err != nil {
		return fmt.Errorf("create a CRD: %w", err)
	}
	return nil
}

// apiCall makes one request to the API with the kubeconfig's token
// (test/kube/control-plane.sh's token auth) and wants the status want.
func apiCall(kc, method, path, contentType string, body []byte, want int) error {
	b, err := os.ReadFile(kc)
	if err != nil {
		return err
	}
	token := regexp.MustCompile(`token: "?([^"\s,}]+)`).FindSubmatch(b)
	server := regexp.MustCompile(`server: "?([^"\s,}]+)`).FindSubmatch(b)
	if token == nil || server == nil {
		return fmt.Errorf("kubeconfig %s: no token or server", kc)
	}
	req, err := http.NewRequest(method, string(server[1])+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token[1]))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test CA
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}

// agent starts cnibox-agent --cluster-ipam-only for node and waits for its
// socket.
func agent(o options, dir, node, kc string) (socket string, stop func(), err error) {
	d := filepath.Join(dir, node)
	socket = filepath.Join(d, "agent.sock")
	log, _ := os.Create(filepath.Join(dir, node+".log"))
	cmd := exec.Command(o.agent, "--cluster-ipam-only", "--node-name", node, "--socket", socket, "--data-dir", d, "--kubeconfig-file", kc, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); log.Close() }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			return socket, stop, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("agent %s did not listen on %s", node, socket)
}

var writeLine = regexp.MustCompile(`msg="cluster IPAM: pool write" pool=(\S+) adds=(\d+) dels=(\d+) took=(\S+) attempts=(\d+)`)

// writeSummary sums up an agent's IPPool writes (its debug log): how many,
// the changes they carried, their attempts and the slowest.
func writeSummary(log string) string {
	var writes, ops, attempts int
	var slowest time.Duration
	for _, m := range writeLine.FindAllStringSubmatch(log, -1) {
		a, _ := strconv.Atoi(m[2])
		d, _ := strconv.Atoi(m[3])
		n, _ := strconv.Atoi(m[5])
		took, _ := time.ParseDuration(m[4])
		writes, ops, attempts = writes+1, ops+a+d, attempts+n
		slowest = max(slowest, took)
	}
	return fmt.Sprintf("%d shared-pool writes carried %d changes in %d attempts; the slowest took %s", writes, ops, attempts, slowest)
}
