package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnibox/cnibox/test/internal/policyload"
)

const (
	selfNode  = "bench-node"
	annPrefix = "flannel.alpha.coreos.com/"
)

// apiAddr is the control plane's API (control-plane.sh's port, 16443 unless
// $KCP_API_PORT moves it); proxyAddr, the port after it, is the agent's way
// to it, counted. (With a moved port and a fixed 16443 here, the agent's
// kubeconfig kept the API's own address and nothing was counted.)
var apiPort, _ = strconv.Atoi(cmp.Or(os.Getenv("KCP_API_PORT"), "16443"))
var apiAddr, proxyAddr = fmt.Sprintf("127.0.0.1:%d", apiPort), fmt.Sprintf("127.0.0.1:%d", apiPort+1)

// kubeRun: a control plane with N realistic Nodes (and, with -pods, the
// pods and policies), then each side's agent in turn on it (a side's
// removal takes its peer away from the next side's).
func kubeRun(o *options, sides []agentSide, n int) ([]row, error) {
	r := row{Peers: "cnibox", Pods: o.pods, Policies: o.policies}
	if flannelPeers {
		r.Peers = "flannel"
	}
	fail := func(err error) ([]row, error) { return nil, err }
	dir, err := os.MkdirTemp("", "cnibox-bench-scale-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	kcp := filepath.Join(dir, "kcp")
	if out, err := exec.Command("bash", o.kcp, "start", kcp, "10.0.0.0/8", "24").CombinedOutput(); err != nil {
		exec.Command("bash", o.kcp, "stop", kcp).Run()
		return fail(fmt.Errorf("start the control plane: %v\n%s", err, out))
	}
	defer exec.Command("bash", o.kcp, "stop", kcp).Run()
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(kcp, "kubeconfig"))
	if err != nil {
		return fail(err)
	}
	rc.QPS, rc.Burst = 2000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	ps := peers(n)
	t := time.Now()
	if err := parallel(16, len(ps), func(i int) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, simNode(ps[i], time.Now()), metav1.CreateOptions{FieldManager: "kubelet"})
		return err
	}); err != nil {
		return fail(fmt.Errorf("create nodes: %w", err))
	}
	o.logf("kube: %d nodes created in %s", n, time.Since(t))
	// The agent's own Node as a kubelet registers it: with annotations
	// (flanneld's kube subnet manager writes into the map and panics on a
	// Node that has none).
	self := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: selfNode, Annotations: map[string]string{
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
	}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, self, metav1.CreateOptions{}); err != nil {
		return fail(err)
	}
	var selfCIDR netip.Prefix
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		self, err := cs.CoreV1().Nodes().Get(ctx, selfNode, metav1.GetOptions{})
		if err == nil && self.Spec.PodCIDR != "" {
			selfCIDR, err = netip.ParsePrefix(self.Spec.PodCIDR)
			if err != nil {
				return fail(err)
			}
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("the node IPAM controller gave %s no podCIDR (log %s)", selfNode, filepath.Join(kcp, "kcm.log")))
		}
	}
	if o.pods > 0 {
		if err := populatePolicy(o, cs, ps, selfCIDR); err != nil {
			return fail(err)
		}
	}
	r.ManagedFields, err = managedFieldsSize(cs, ps[0].name)
	if err != nil {
		return fail(err)
	}
	var rows []row
	for _, side := range sides {
		sr := r
		sr.Policy = side.policy
		removed, err := kubeAgentRun(o, &sr, side, rc, cs, dir, ps)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", side.name, err)
		}
		rows = append(rows, sr)
		ps = slices.DeleteFunc(slices.Clone(ps), func(p peer) bool { return p.name == removed.name })
	}
	return rows, nil
}

// kubeAgentRun runs one side's agent against the control plane with the
// peers ps, fills r, and returns the peer it removed.
func kubeAgentRun(o *options, r *row, side agentSide, rc *rest.Config, cs kubernetes.Interface, dir string, ps []peer) (peer, error) {
	bin, n, ctx, kcp := side.bin, len(ps), context.Background(), filepath.Join(dir, "kcp")
	gone := ps[n/2]
	// The agent reaches the API through a proxy that counts what it reads.
	px, err := newCountingProxy()
	if err != nil {
		return gone, err
	}
	defer px.close()
	kc, err := os.ReadFile(filepath.Join(kcp, "kubeconfig"))
	if err != nil {
		return gone, err
	}
	agentKC, netConf := filepath.Join(dir, "kubeconfig-agent"), filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(agentKC, []byte(strings.ReplaceAll(string(kc), apiAddr, proxyAddr)), 0o600); err != nil {
		return gone, err
	}
	if err := os.WriteFile(netConf, []byte(`{"Network": "10.0.0.0/8", "Backend": {"Type": "vxlan"}}`), 0o644); err != nil {
		return gone, err
	}
	adir, err := os.MkdirTemp(dir, "agent-") // its own store and log
	if err != nil {
		return gone, err
	}
	a, err := newAgent(o, adir, n, typeVXLAN)
	if err != nil {
		return gone, err
	}
	defer a.close()
	os.Setenv("NODE_NAME", selfNode) // both agents read it
	t0, err := a.start(bin, append([]string{"--kube-subnet-mgr", "--kubeconfig-file", agentKC, "--net-config-path", netConf}, side.args...)...)
	if err != nil {
		return gone, err
	}
	done, err := a.converged(o.timeout)
	if err != nil {
		return gone, err
	}
	_, _, cpu := a.usage()
	r.ConvergeS, r.ConvergeCPUS = done.Sub(t0).Seconds(), cpu.Seconds()
	o.logf("kube: converged in %.2fs", r.ConvergeS)
	if side.policy {
		done, err := policySynced(a, o.timeout)
		if err != nil {
			return gone, err
		}
		r.PolicySyncS = done.Sub(t0).Seconds()
		o.logf("kube: the policy table synced %.2fs after the start", r.PolicySyncS)
	}
	heapProfile(fmt.Sprintf("kube-%d-converged.pb.gz", n))
	if r.Mismatches, err = a.settledMismatches(ps); err != nil {
		return gone, err
	}

	// Unrelated status updates: kubelets' status patches of simulated
	// nodes, counted at the agent and over four kinds of watch.
	lst, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return gone, err
	}
	watches := map[string]*rawWatch{}
	for name, accept := range map[string]string{
		"json":       "application/json",
		"proto":      "application/vnd.kubernetes.protobuf",
		"meta-json":  "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
		"meta-proto": "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
	} {
		w, err := openWatch(rc, accept, lst.ResourceVersion)
		if err != nil {
			return gone, err
		}
		defer w.close()
		watches[name] = w
	}
	quiet(px, 2*time.Second)
	b0, w0 := px.read.Load(), snapshot(watches)
	_, _, c0 := a.usage()
	k := o.updates
	t := time.Now()
	if err := parallel(8, k, func(i int) error {
		return heartbeat(ctx, cs, ps[i%len(ps)].name, time.Now())
	}); err != nil {
		return gone, fmt.Errorf("status updates: %w", err)
	}
	quiet(px, 2*time.Second)
	o.logf("kube: %d status updates in %s", k, time.Since(t))
	_, _, c1 := a.usage()
	w1 := snapshot(watches)
	r.UpdBytes = float64(px.read.Load()-b0) / float64(k)
	r.UpdCPUms = float64((c1 - c0).Microseconds()) / 1000 / float64(k)
	r.WatchJSON = float64(w1["json"]-w0["json"]) / float64(k)
	r.WatchProto = float64(w1["proto"]-w0["proto"]) / float64(k)
	r.WatchMetaJSON = float64(w1["meta-json"]-w0["meta-json"]) / float64(k)
	r.WatchMetaProto = float64(w1["meta-proto"]-w0["meta-proto"]) / float64(k)
	if bad, err := a.mismatches(ps); err != nil || bad > 0 {
		return gone, fmt.Errorf("after the status updates the kernel differs from the peers by %d (%v)", bad, err)
	}

	if o.pods > 0 {
		if r.ChurnBytes, r.ChurnCPUms, err = podChurn(o, cs, a, px); err != nil {
			return gone, err
		}
	}
	if err := r.removal(a, gone, func() error {
		return cs.CoreV1().Nodes().Delete(ctx, gone.name, metav1.DeleteOptions{})
	}); err != nil {
		return gone, err
	}
	time.Sleep(o.settle) // steady running: the RSS of the state it holds, not of the last step
	rss, hwm, _ := a.usage()
	r.RSSMiB, r.PeakMiB, r.AnonMiB, r.Load = float64(rss)/1024, float64(hwm)/1024, float64(a.anonKiB)/1024, loadavg()
	heapProfile(fmt.Sprintf("kube-%d-end.pb.gz", n))
	o.logf("kube: the agent's log:\n%s", a.logTail())
	return gone, nil
}

// parallel runs fn(0..n-1) on w workers; the first error wins.
var parallel = policyload.Parallel

// heartbeat is a kubelet's status patch: new heartbeat times on every
// condition.
func heartbeat(ctx context.Context, cs kubernetes.Interface, name string, now time.Time) error {
	ts := now.UTC().Format(time.RFC3339)
	var conds []string
	for _, c := range conditionTypes {
		conds = append(conds, fmt.Sprintf(`{"type":%q,"lastHeartbeatTime":%q}`, c, ts))
	}
	patch := `{"status":{"conditions":[` + strings.Join(conds, ",") + `]}}`
	_, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubelet"}, "status")
	return err
}

// managedFieldsSize is the JSON size of one node's managedFields.
func managedFieldsSize(cs kubernetes.Interface, name string) (int, error) {
	b, err := cs.CoreV1().RESTClient().Get().Resource("nodes").Name(name).DoRaw(context.Background())
	if err != nil {
		return 0, err
	}
	i := strings.Index(string(b), `"managedFields":`)
	if i < 0 {
		return 0, nil
	}
	depth, j := 0, i+len(`"managedFields":`)
	for ; j < len(b); j++ {
		switch b[j] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		}
		if depth == 0 {
			break
		}
	}
	return j + 1 - i, nil
}

// countingProxy forwards the agent's connections to the API server and
// counts the bytes the agent reads (TLS records as on the wire).
type countingProxy struct {
	ln   net.Listener
	read atomic.Int64
}

func newCountingProxy() (*countingProxy, error) {
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				up, err := net.Dial("tcp", apiAddr)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, in)
				io.Copy(countWriter{in, &p.read}, up)
			}()
		}
	}()
	return p, nil
}

func (p *countingProxy) close() { p.ln.Close() }

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// quiet waits until the proxy has carried nothing for d.
func quiet(p *countingProxy, d time.Duration) {
	last, since := p.read.Load(), time.Now()
	for time.Since(since) < d {
		time.Sleep(50 * time.Millisecond)
		if v := p.read.Load(); v != last {
			last, since = v, time.Now()
		}
	}
}

// rawWatch is a watch of all Nodes in one encoding, its payload counted.
type rawWatch struct {
	body io.ReadCloser
	n    atomic.Int64
}

func openWatch(rc *rest.Config, accept, rv string) (*rawWatch, error) {
	tr, err := rest.TransportFor(rc)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, rc.Host+"/api/v1/nodes?watch=true&resourceVersion="+rv, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("watch as %s: %s: %s", accept, resp.Status, b)
	}
	w := &rawWatch{body: resp.Body}
	go io.Copy(countWriter{io.Discard, &w.n}, resp.Body)
	return w, nil
}

func (w *rawWatch) close() { w.body.Close() }

func snapshot(ws map[string]*rawWatch) map[string]int64 {
	out := map[string]int64{}
	for k, w := range ws {
		out[k] = w.n.Load()
	}
	return out
}
