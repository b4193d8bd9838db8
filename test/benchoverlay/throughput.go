package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
	"github.com/cnibox/cnibox/test/internal/netload"
	"github.com/cnibox/cnibox/test/internal/snmp"
)

// tputRow is one throughput measurement.
type tputRow struct {
	Path      string  `json:"path"`
	Gbps      float64 `json:"gbps"`
	RTTus     float64 `json:"rttUs"`     // median TCP round trip of a 1-byte request and answer
	MTU       int     `json:"mtu"`       // of the sending interface
	Fragments int     `json:"fragments"` // IP fragments created on the path during the run
}

// pathCase is one backend's pod-to-pod path.
type pathCase struct {
	name    string
	backend string // net-conf.json's Backend
	conf    func(nd *node) string
	// underlay: also measure node to node without the overlay.
	underlay bool
	// noPeerRoutes: the backend routes the whole network into its device
	// (wireguard); the nodes are ready once both wrote subnet.env.
	noPeerRoutes bool
}

// vxlanConf is the vxlan role's conflist; flannelConf the flannel role's
// (subnet.env and a bridge delegate, as kube-flannel's), which every
// backend's pods use.
func vxlanConf(*node) string {
	return `{"cniVersion": "1.1.0", "name": "overlay", "plugins": [{"type": "vxlan"}]}`
}

func flannelConf(nd *node) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "cbr0", "plugins": [{"type": "flannel", "subnetFile": %q, "dataDir": %q,
		"delegate": {"hairpinMode": true, "isDefaultGateway": true}}]}`, nd.subnetFile, filepath.Join(nd.dataDir, "flannel"))
}

// pathCases are the rows, in order; "pods, no overlay (direct routing)" is
// the plain path the others are compared with.
var pathCases = []pathCase{
	{name: "pods across the overlay (vxlan)", backend: `{"Type": "vxlan"}`, conf: vxlanConf, underlay: true},
	{name: "pods, no overlay (direct routing)", backend: `{"Type": "vxlan", "DirectRouting": true}`, conf: vxlanConf},
	{name: "pods over host-gw", backend: `{"Type": "host-gw"}`, conf: flannelConf},
	{name: "pods over wireguard", backend: `{"Type": "wireguard"}`, conf: flannelConf, noPeerRoutes: true},
	{name: "pods over ipip", backend: `{"Type": "ipip"}`, conf: flannelConf},
}

// throughputRun measures TCP pod to pod over each backend (vxlan, vxlan
// with DirectRouting, host-gw, wireguard, ipip; a backend this kernel lacks
// is reported and skipped), and the nodes over the underlay.
func throughputRun(o *options) ([]tputRow, error) {
	var out []tputRow
	for _, pc := range pathCases {
		if len(o.backends) > 0 && !slices.Contains(o.backends, pc.name) && !slices.Contains(o.backends, backendType(pc.backend)) {
			continue
		}
		rows, err := podPair(o, pc)
		if errors.Is(err, errKernelLacks) {
			fmt.Fprintf(os.Stderr, "bench-overlay: %s: skipped, this kernel lacks it (%v)\n", pc.name, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// backendType returns the Type of a Backend document.
func backendType(backend string) string {
	var b struct{ Type string }
	json.Unmarshal([]byte(backend), &b)
	return b.Type
}

// errKernelLacks: the agent could not make the backend's device.
var errKernelLacks = errors.New("the kernel lacks the backend's device")

func jsonLine(kind string, v any) string {
	b, _ := json.Marshal(v)
	var m map[string]any
	json.Unmarshal(b, &m)
	m["kind"] = kind
	b, _ = json.Marshal(m)
	return string(b)
}

// podPair runs two nodes with one pod each and measures pod to pod (and,
// with pc.underlay, node to node over the underlay).
func podPair(o *options, pc pathCase) ([]tputRow, error) {
	conf := `{"Network": "10.244.0.0/16", "Backend": ` + pc.backend + `}`
	c, err := newCluster(o, 2, conf)
	defer c.close()
	if err != nil {
		return nil, err
	}
	for _, nd := range c.nodes {
		nd.routes.SetWant(1)
		if err := nd.startAgent(); err != nil {
			return nil, err
		}
	}
	for deadline := time.Now().Add(o.timeout); ; time.Sleep(20 * time.Millisecond) {
		ready := true
		for _, nd := range c.nodes {
			t, _ := nd.routes.Complete()
			done := !t.IsZero()
			if pc.noPeerRoutes {
				_, err := os.Stat(nd.subnetFile)
				done = err == nil
			}
			ready = ready && done
		}
		if ready {
			break
		}
		for _, nd := range c.nodes {
			if b, _ := os.ReadFile(nd.logPath); bytes.Contains(b, []byte("the kernel has no")) {
				return nil, fmt.Errorf("%w: node %d's log: %s", errKernelLacks, nd.i, lastLine(b))
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the two nodes did not program each other (logs in %s)", c.dir)
		}
	}

	binDir := filepath.Join(c.dir, "cni-bin")
	if out, err := exec.Command(o.cnibox, "install", "--dir", binDir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cnibox install: %v: %s", err, out)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(c.dir, "cni-cache"), nil)
	lists := map[*node]*libcni.NetworkConfigList{}
	for _, nd := range c.nodes {
		l, err := libcni.ConfListFromBytes([]byte(pc.conf(nd)))
		if err != nil {
			return nil, err
		}
		lists[nd] = l
	}
	var pods []podNS
	defer func() {
		for _, p := range pods {
			netops.DeleteNamedNS(p.name)
		}
	}()
	for _, nd := range c.nodes {
		p := podNS{name: fmt.Sprintf("cbxo-%d-p%d", os.Getpid(), nd.i)}
		if p.path, err = netops.CreateNamedNS(p.name); err != nil {
			return nil, err
		}
		pods = append(pods, p)
		rt := &libcni.RuntimeConf{ContainerID: p.name, NetNS: p.path, IfName: "eth0"}
		var res *current.Result
		err := onNode(nd, func() error {
			r, err := cni.AddNetworkList(context.Background(), lists[nd], rt)
			if err == nil {
				res, err = current.NewResultFromResult(r)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("ADD on node %d: %w", nd.i, err)
		}
		for _, ipc := range res.IPs {
			if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap().Is4() {
				pods[len(pods)-1].ip = a.Unmap()
			}
		}
	}
	mtu := 0
	if h, err := netops.Open(pods[0].path); err == nil {
		if l, err := h.LinkByName("eth0"); err == nil {
			mtu = l.MTU
		}
		h.Close()
	}
	name := pc.name
	nss := []string{c.nodes[0].ns, c.nodes[1].ns, pods[0].path, pods[1].path}
	before := fragments(nss)
	gbps, err := iperf(o, pods[0].path, pods[1].path, pods[1].ip)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	frags := fragments(nss) - before
	rtt, err := pingPong(pods[0].path, pods[1].path, pods[1].ip)
	if err != nil {
		return nil, fmt.Errorf("%s: round trips: %w", name, err)
	}
	rows := []tputRow{{Path: name, Gbps: gbps, RTTus: rtt, MTU: mtu, Fragments: frags}}
	if pc.underlay {
		before := fragments(nss[:2])
		gbps, err := iperf(o, c.nodes[0].ns, c.nodes[1].ns, c.nodes[1].ip)
		if err != nil {
			return nil, fmt.Errorf("underlay: %w", err)
		}
		frags := fragments(nss[:2]) - before
		rtt, err := pingPong(c.nodes[0].ns, c.nodes[1].ns, c.nodes[1].ip)
		if err != nil {
			return nil, fmt.Errorf("underlay: round trips: %w", err)
		}
		rows = append(rows, tputRow{Path: "nodes over the underlay", Gbps: gbps, RTTus: rtt, MTU: 1500, Fragments: frags})
	}
	for i, nd := range c.nodes {
		rt := &libcni.RuntimeConf{ContainerID: pods[i].name, NetNS: pods[i].path, IfName: "eth0"}
		if err := onNode(nd, func() error { return cni.DelNetworkList(context.Background(), lists[nd], rt) }); err != nil {
			return nil, fmt.Errorf("DEL on node %d: %w", nd.i, err)
		}
	}
	return rows, nil
}

type podNS struct {
	name, path string
	ip         netip.Addr
}

var envMu sync.Mutex

// onNode runs a libcni call with the plugins started in the node's
// namespace and using its store; the plugins log next to it, not to the
// machine's /var/log/cnibox.
func onNode(nd *node, fn func() error) error {
	envMu.Lock()
	defer envMu.Unlock()
	os.Setenv(store.EnvDataDir, nd.dataDir)
	defer os.Unsetenv(store.EnvDataDir)
	os.Setenv("CNIBOX_LOG_FILE", filepath.Join(nd.dataDir, "cnibox.log"))
	defer os.Unsetenv("CNIBOX_LOG_FILE")
	return runIn(nd.ns, fn)
}

// iperf returns the median of three iperf3 runs (the machine may be busy
// with other work).
func iperf(o *options, cli, srv string, ip netip.Addr) (float64, error) {
	var runs []float64
	for range 3 {
		g, err := iperfOnce(o, cli, srv, ip)
		if err != nil {
			return 0, err
		}
		runs = append(runs, g)
	}
	slices.Sort(runs)
	return runs[1], nil
}

// iperfOnce runs iperf3's server in the namespace srv on ip and its client
// in cli (test/internal/netload), and returns the received rate.
func iperfOnce(o *options, cli, srv string, ip netip.Addr) (float64, error) {
	return netload.IPerf3{ClientNS: cli, ServerNS: srv, Server: ip, Secs: o.iperfSecs}.TCP(1)
}

// fragments sums the IPv4 fragments created (Ip: FragCreates) in the
// namespaces.
func fragments(nss []string) int {
	total := 0
	for _, ns := range nss {
		runIn(ns, func() error {
			b, err := os.ReadFile("/proc/thread-self/net/snmp")
			if err != nil {
				return err
			}
			n, err := snmp.Value(string(b), "Ip", "FragCreates")
			total += int(n)
			return err
		})
	}
	return total
}
