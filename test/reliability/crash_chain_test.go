package reliability

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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/store"
)

// Crash consistency of the roles around bridge: the chained roles (portmap,
// tuning, bandwidth) in a conflist run by libcni, and the meta roles that
// delegate whole networks (flannel, multi, vxlan). Each run kills one plugin
// process at one fault point, then does what a runtime does next, through
// libcni as containerd and CRI-O do, and looks at everything the roles keep:
// reservations, endpoint records, veths, masquerade entries, MAC spoof
// chains (assertOnly of crash_test.go), and portmap elements and records,
// tuning and bandwidth records, ifb devices and tc qdiscs, delegate records.

// faultExec is libcni's plugin exec with more environment for the plugin
// (the node's data dir, the fault point) that notes whether a plugin died of
// a signal.
type faultExec struct {
	env    []string
	killed atomic.Bool
}

func (e *faultExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = append(slices.Clone(environ), e.env...) // the last of a key wins
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s hung for %s", filepath.Base(path), callTimeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.killed.Store(true)
			return nil, fmt.Errorf("%s killed by %v", filepath.Base(path), ws.Signal())
		}
	}
	var te types.Error
	if json.Unmarshal(stdout.Bytes(), &te) == nil && te.Code != 0 {
		return nil, &te
	}
	return nil, fmt.Errorf("%s: %v without a CNI error: stdout %q stderr %q", filepath.Base(path), err, stdout.Bytes(), stderr.Bytes())
}

func (e *faultExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *faultExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

// chainNet is one run's network as libcni and the checks see it.
type chainNet struct {
	list *libcni.NetworkConfigList
	// bridges are the bridge networks a pod is attached to, with the
	// pod's interface on each; the first is the primary (CNI_IFNAME).
	bridges []bridgeAt
	// What the roles of the network keep besides bridge's state.
	portmap, tuning, bandwidth, delegates bool
}

type bridgeAt struct {
	nw     tnet
	ifname string
}

// cpod is a pod of a chainNet.
type cpod struct {
	cid, netns string
	rt         *libcni.RuntimeConf
	ips        [][]netip.Addr // per bridge network, from the ADD result (and the delegate record)
	somax      string         // net.core.somaxconn in the pod before any ADD
}

// crashFamily is a kind of network with its fault points.
type crashFamily struct {
	name                 string
	addPoints, delPoints []string
	net                  func(t *testing.T, i int) *chainNet
}

// The fault points of each family, in the order a call passes them (for the
// chain: ADD runs bridge, portmap, tuning, bandwidth; DEL the reverse).
var crashFamilies = []crashFamily{
	{
		name: "chain",
		addPoints: []string{
			"portmap/add/after-nft", "portmap/add/after-localnet", "portmap/add/after-record",
			"tuning/add/after-record", "tuning/add/after-sysctl", "tuning/add/after-link",
			"bandwidth/add/after-record", "bandwidth/add/after-ingress", "bandwidth/add/after-ifb", "bandwidth/add/after-egress",
		},
		delPoints: []string{
			"bandwidth/del/after-teardown", "bandwidth/del/after-record",
			"tuning/del/after-restore", "tuning/del/after-record",
			"portmap/del/after-nft", "portmap/del/after-record",
		},
		net: chainConflist,
	},
	{
		name:      "flannel",
		addPoints: []string{"flannel/add/after-record", "bridge/add/after-veth", "flannel/add/after-delegate"},
		delPoints: []string{"bridge/del/after-veth", "flannel/del/after-delegate", "flannel/del/after-record"},
		net:       flannelNet,
	},
	{
		name: "multi",
		addPoints: []string{"multi/add/after-record", "multi/add/after-delegate0", "bridge/add/after-veth",
			"multi/add/after-delegate1", "multi/add/after-results"},
		delPoints: []string{"multi/del/after-delegate1", "multi/del/after-delegate0", "multi/del/after-record"},
		net:       multiNet,
	},
	{
		name:      "vxlan",
		addPoints: []string{"flannel/add/after-record", "vxlan/add/after-flannel"},
		delPoints: []string{"flannel/del/after-delegate", "vxlan/del/after-flannel"},
		net:       vxlanNet,
	},
}

func listOf(t *testing.T, s string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(s))
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, s)
	}
	return l
}

// chainConflist is bridge (dual stack, masquerade, MAC spoof check) +
// host-local, portmap, tuning (a namespace sysctl, an interface sysctl,
// promiscuous mode, txqueuelen) and bandwidth (both directions).
func chainConflist(t *testing.T, i int) *chainNet {
	name, br := fmt.Sprintf("cchain%d", i), fmt.Sprintf("brc%d", i)
	return &chainNet{
		list: listOf(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
	{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,"macspoofchk":true,
	 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.93.%d.0/24"}],[{"subnet":"fd93:0:0:%x::/64"}]]}},
	{"type":"portmap","capabilities":{"portMappings":true},"snat":true},
	{"type":"tuning","sysctl":{"net.core.somaxconn":"1111","net.ipv4.conf.IFNAME.arp_notify":"1"},"promisc":true,"txQLen":555},
	{"type":"bandwidth","ingressRate":100000000,"ingressBurst":10000000,"egressRate":50000000,"egressBurst":5000000}]}`,
			name, br, i, i)),
		bridges: []bridgeAt{{tnet{name, br}, "eth0"}},
		portmap: true, tuning: true, bandwidth: true,
	}
}

// flannelNet is the flannel role on a subnet.env of its own.
func flannelNet(t *testing.T, i int) *chainNet {
	name, br := fmt.Sprintf("cflannel%d", i), fmt.Sprintf("brf%d", i)
	env := subnetEnv(t, 94, i)
	return &chainNet{
		list: listOf(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
	{"type":"flannel","subnetFile":%q,"delegate":{"bridge":%q,"hairpinMode":true}}]}`, name, env, br)),
		bridges:   []bridgeAt{{tnet{name, br}, "eth0"}},
		delegates: true,
	}
}

// vxlanNet is the vxlan role without an agent: with no agent state in the
// store it takes the lease from its subnet file, as with flanneld.
func vxlanNet(t *testing.T, i int) *chainNet {
	name, br := fmt.Sprintf("cvxlan%d", i), fmt.Sprintf("brv%d", i)
	env := subnetEnv(t, 97, i)
	return &chainNet{
		list: listOf(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
	{"type":"vxlan","subnetFile":%q,"delegate":{"bridge":%q}}]}`, name, env, br)),
		bridges:   []bridgeAt{{tnet{name, br}, "eth0"}},
		delegates: true,
	}
}

// multiNet is the multi role with two bridge networks: eth0 and net1.
func multiNet(t *testing.T, i int) *chainNet {
	name := fmt.Sprintf("cmulti%d", i)
	a, b := tnet{fmt.Sprintf("cmultia%d", i), fmt.Sprintf("brm%d", i)}, tnet{fmt.Sprintf("cmultib%d", i), fmt.Sprintf("brn%d", i)}
	return &chainNet{
		list: listOf(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"multi","delegates":[
	{"name":%q,"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.95.%d.0/24"}]]}},
	{"name":%q,"type":"bridge","bridge":%q,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.96.%d.0/24"}]]}}]}]}`,
			name, a.name, a.bridge, i, b.name, b.bridge, i)),
		bridges:   []bridgeAt{{a, "eth0"}, {b, "net1"}},
		delegates: true,
	}
}

// subnetEnv writes a subnet.env leasing 10.<b>.<i>.0/24 out of 10.<b>.0.0/16.
func subnetEnv(t *testing.T, b, i int) string {
	p := filepath.Join(t.TempDir(), "subnet.env")
	s := fmt.Sprintf("FLANNEL_NETWORK=10.%d.0.0/16\nFLANNEL_SUBNET=10.%d.%d.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n", b, b, i)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// chainRunner drives one run's calls through libcni on the test's node.
type chainRunner struct {
	t        *testing.T
	n        *node // a copy of the shared node with this run's t
	cacheDir string
	cn       *chainNet
	port     int // the next host port to map
}

// cni returns a libcni for one call, with the fault point if any, and its
// exec (which tells whether a plugin was killed).
func (r *chainRunner) cni(point string) (*libcni.CNIConfig, *faultExec) {
	fe := &faultExec{env: []string{"CNIBOX_DATA_DIR=" + r.n.dataDir, "CNIBOX_LOG_FILE=off"}}
	if point != "" {
		fe.env = append(fe.env, "CNIBOX_FAULT="+point)
	}
	return libcni.NewCNIConfigWithCacheDir([]string{r.n.binDir}, r.cacheDir, fe), fe
}

func (r *chainRunner) newPod(prefix string) *cpod {
	r.t.Helper()
	p := &cpod{cid: uniq(prefix), netns: newNS(r.t)}
	p.rt = &libcni.RuntimeConf{ContainerID: p.cid, NetNS: p.netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "crash"}, {"K8S_POD_NAME", p.cid}}}
	if r.cn.portmap {
		p.rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{
			{"hostPort": r.port, "containerPort": 80, "protocol": "tcp"},
			{"hostPort": r.port, "containerPort": 53, "protocol": "udp"},
		}}
		r.port++
	}
	if r.cn.tuning {
		p.somax = r.podSysctl(p, "net.core.somaxconn")
	}
	return p
}

func (r *chainRunner) podSysctl(p *cpod, key string) string {
	r.t.Helper()
	h, err := netops.Open(p.netns)
	if err != nil {
		r.t.Fatal(err)
	}
	defer h.Close()
	v, err := h.Sysctl(key)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// add runs ADD of the list; killed reports a plugin died at the point.
func (r *chainRunner) add(p *cpod, point string) (killed bool, err error) {
	r.t.Helper()
	c, fe := r.cni(point)
	res, err := c.AddNetworkList(context.Background(), r.cn.list, p.rt)
	if err != nil {
		return fe.killed.Load(), err
	}
	p.ips = r.addrs(p, res)
	return false, nil
}

func (r *chainRunner) mustAdd(p *cpod) {
	r.t.Helper()
	if _, err := r.add(p, ""); err != nil {
		r.t.Fatalf("ADD %s: %v", p.cid, err)
	}
}

// addrs returns the pod's addresses on each bridge network: the primary's
// from the ADD result, the others' from the delegate record (multi).
func (r *chainRunner) addrs(p *cpod, res types.Result) [][]netip.Addr {
	r.t.Helper()
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		r.t.Fatalf("ADD result: %v", err)
	}
	b, _ := json.Marshal(cur)
	out := [][]netip.Addr{resultIPs(r.t, b)}
	if len(r.cn.bridges) == 1 {
		return out
	}
	st, err := store.OpenWith(r.n.dataDir, store.Options{NoCreate: true})
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Close()
	rec, found, err := delegaterec.Records.In(st).Get(r.cn.list.Name, p.cid, "eth0")
	if err != nil || !found {
		r.t.Fatalf("delegate record of %s: found %v, %v", p.cid, found, err)
	}
	for _, d := range rec.Delegates[1:] {
		out = append(out, resultIPs(r.t, d.Result))
	}
	return out
}

// del runs DEL of the list twice (containerd's stop and remove) with the
// pod's netns, or none when it is gone.
func (r *chainRunner) del(p *cpod) {
	r.t.Helper()
	c, _ := r.cni("")
	for i := 0; i < 2; i++ {
		if err := c.DelNetworkList(context.Background(), r.cn.list, p.rt); err != nil {
			r.t.Fatalf("DEL #%d %s: %v", i+1, p.cid, err)
		}
	}
}

func (r *chainRunner) gc(keep ...*cpod) {
	r.t.Helper()
	c, _ := r.cni("")
	var valid []types.GCAttachment
	for _, p := range keep {
		valid = append(valid, types.GCAttachment{ContainerID: p.cid, IfName: "eth0"})
	}
	if err := c.GCNetworkList(context.Background(), r.cn.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		r.t.Fatalf("GC: %v", err)
	}
}

// dropCache removes libcni's cache entry of the pod, as a runtime that
// lost it would be.
func (r *chainRunner) dropCache(p *cpod) {
	r.t.Helper()
	f := filepath.Join(r.cacheDir, "results", r.cn.list.Name+"-"+p.cid+"-eth0")
	if err := os.Remove(f); err != nil {
		r.t.Fatalf("drop libcni's cache entry: %v", err)
	}
}

func (r *chainRunner) check(p *cpod) {
	r.t.Helper()
	c, _ := r.cni("")
	if err := c.CheckNetworkList(context.Background(), r.cn.list, p.rt); err != nil {
		r.t.Errorf("CHECK %s: %v", p.cid, err)
	}
}

// assertOnly checks that what is left of the network is the kept pods'
// (bridge's state on each bridge network as in crash_test.go, and the
// records and kernel state of portmap, tuning, bandwidth and the meta
// roles), and nothing at all of the gone pods.
func (r *chainRunner) assertOnly(keep []*cpod, gone ...*cpod) {
	r.t.Helper()
	for bi, b := range r.cn.bridges {
		var ka, ga []*attachment
		for _, p := range keep {
			ka = append(ka, &attachment{cid: p.cid, ifname: b.ifname, netns: p.netns, ips: p.ips[bi]})
		}
		for _, p := range gone {
			ga = append(ga, &attachment{cid: p.cid, ifname: b.ifname})
		}
		r.n.assertOnly(b.nw, ka, ga...)
	}
	name := r.cn.list.Name
	kept := map[string]bool{}
	for _, p := range keep {
		kept[p.cid] = true
	}
	// records: each kept pod has one per role, nobody else any
	records := func(what string, cids []string) {
		r.t.Helper()
		have := map[string]bool{}
		for _, cid := range cids {
			if !kept[cid] {
				r.t.Errorf("leaked %s record of %s", what, cid)
			}
			have[cid] = true
		}
		for _, p := range keep {
			if !have[p.cid] {
				r.t.Errorf("the %s record of kept %s is gone", what, p.cid)
			}
		}
	}
	st, err := store.OpenWith(r.n.dataDir, store.Options{NoCreate: true})
	if err != nil {
		r.t.Fatal(err)
	}
	var pmRecs, tuRecs, bwRecs, dlgRecs []string
	err = portmap.Records.View(st, func(tx store.KindTx[portmap.Record]) error {
		rs, err := tx.List(name)
		for _, x := range rs {
			pmRecs = append(pmRecs, x.ContainerID)
		}
		return err
	})
	if err == nil {
		var rs []tuning.Record
		rs, err = tuning.Records.In(st).List(name)
		for _, x := range rs {
			tuRecs = append(tuRecs, x.ContainerID)
		}
	}
	if err == nil {
		var rs []bandwidth.Record
		rs, err = bandwidth.Records.In(st).List(name)
		for _, x := range rs {
			bwRecs = append(bwRecs, x.ContainerID)
		}
	}
	if err == nil {
		var rs []delegaterec.Record
		rs, err = delegaterec.Records.In(st).List(name)
		for _, x := range rs {
			dlgRecs = append(dlgRecs, x.ContainerID)
		}
	}
	st.Close()
	if err != nil {
		r.t.Fatalf("read the store: %v", err)
	}
	for what, on := range map[string]bool{"portmap": r.cn.portmap, "tuning": r.cn.tuning, "bandwidth": r.cn.bandwidth, "delegate": r.cn.delegates} {
		cids := map[string][]string{"portmap": pmRecs, "tuning": tuRecs, "bandwidth": bwRecs, "delegate": dlgRecs}[what]
		if on {
			records(what, cids)
		} else if len(cids) > 0 {
			r.t.Errorf("%s records %v on a network without %s", what, cids, what)
		}
	}

	h, err := netops.Open("")
	if err != nil {
		r.t.Fatal(err)
	}
	defer h.Close()
	if r.cn.portmap {
		entries, err := h.NFT().PortMapEntries()
		if err != nil {
			r.t.Fatal(err)
		}
		elems := map[string]int{}
		for _, e := range entries {
			f := strings.Fields(e.Owner) // "<network> <containerID> <ifname>"
			if len(f) != 3 || f[0] != name {
				continue
			}
			if !kept[f[1]] {
				r.t.Errorf("orphan portmap elements of %s: %v %v", f[1], e.Mappings, e.Masq)
			}
			elems[f[1]] += len(e.Mappings)
		}
		for _, p := range keep {
			// tcp and udp, to each of the pod's two addresses
			if elems[p.cid] != 4 {
				r.t.Errorf("kept %s has %d port mappings, want 4", p.cid, elems[p.cid])
			}
		}
	}
	if r.cn.bandwidth {
		links, err := h.Links()
		if err != nil {
			r.t.Fatal(err)
		}
		ifbs := map[string]bool{}
		for _, l := range links {
			if l.Kind == "ifb" {
				ifbs[l.Name] = true
			}
		}
		for _, p := range gone {
			if ifb := ifbName(p.cid, "eth0"); ifbs[ifb] {
				r.t.Errorf("orphan ifb %s of %s", ifb, p.cid)
			}
		}
		for _, p := range keep {
			if ifb := ifbName(p.cid, "eth0"); !ifbs[ifb] {
				r.t.Errorf("ifb %s of kept %s is gone", ifb, p.cid)
			}
			veth := hostVeth(p.cid, "eth0")
			if _, found, err := h.RootTBF(veth); err != nil || !found {
				r.t.Errorf("tbf on %s of kept %s: found %v, %v", veth, p.cid, found, err)
			}
			if _, found, err := h.IngressRedirect(veth); err != nil || !found {
				r.t.Errorf("ingress redirect on %s of kept %s: found %v, %v", veth, p.cid, found, err)
			}
		}
	}
}

// ifbName is the bandwidth role's ifb device name of an attachment (the
// host veth's hash under another prefix).
func ifbName(cid, ifname string) string {
	return "cbw" + strings.TrimPrefix(hostVeth(cid, ifname), "cbx")
}

// chainAddOutcomes is what a runtime does after an ADD that died: those of
// crash_test.go, and GC once the namespace is gone too (the meta roles'
// records name it: their GC must cope with a namespace that is no more).
var chainAddOutcomes = append(slices.Clone(addOutcomes), "GC after the netns is gone")

// chainDelOutcomes is what a runtime does after a DEL that died. libcni's GC
// first repeats DEL for attachments in its cache, so the roles' own GC of a
// half-deleted attachment runs only when that cache entry is gone (a
// runtime without it, or one that lost /var/lib/cni): the third outcome.
var chainDelOutcomes = []string{"DEL", "GC", "GC, libcni cache lost"}

// crashPairs are the (fault point, runtime action) pairs a family runs:
// every pair with $CNIBOX_CRASH_MATRIX=full (make soak: 142 crashes of the
// four families), else each point and each action at least once, the
// actions taken in turn along the points (40 crashes: make test). The
// short form checks every point and every action, not every pair: a leak
// that only one action after one point shows is make soak's to find.
func crashPairs(t *testing.T, points, outcomes []string) [][2]string {
	var out [][2]string
	switch m := os.Getenv("CNIBOX_CRASH_MATRIX"); m {
	case "full":
		for _, p := range points {
			for _, o := range outcomes {
				out = append(out, [2]string{p, o})
			}
		}
	case "":
		for j := range max(len(points), len(outcomes)) {
			out = append(out, [2]string{points[j%len(points)], outcomes[j%len(outcomes)]})
		}
	default:
		t.Fatalf("CNIBOX_CRASH_MATRIX=%q: want full, or nothing for make test's short form", m)
	}
	return out
}

// TestCrashConsistencyChained kills portmap, tuning and bandwidth in a
// bridge chain, and the flannel, multi and vxlan roles (and bridge inside
// them), at every fault point of their ADD and DEL; then does through
// libcni what a runtime does next (retry ADD, DEL twice, DEL twice after the
// namespace is gone, GC; after a DEL: DEL, GC: every one after every point
// in make soak, crashPairs) and checks that nothing of
// the pod is left, no address is held twice, the store is sound and a
// bystander pod of the same network is untouched (and passes CHECK).
// The families run in parallel on one node (one store, one nftables).
func TestCrashConsistencyChained(t *testing.T) {
	shared := newNode(t, faultBin(t))
	cacheDir := t.TempDir()
	var (
		mu    sync.Mutex
		table = map[string][]string{}
		runs  int
		port  atomic.Int32
	)
	port.Store(20000)

	scenario := func(t *testing.T, fam crashFamily, i int, point, verb, outcome string) {
		n := *shared
		n.t = t
		r := &chainRunner{t: t, n: &n, cacheDir: cacheDir, cn: fam.net(t, i), port: int(port.Add(2))}
		bystander := r.newPod("bystander")
		r.mustAdd(bystander)
		keep := []*cpod{bystander}
		victim := r.newPod("crash")
		if verb == "DEL" {
			r.mustAdd(victim)
		}
		var killed bool
		var err error
		if verb == "ADD" {
			killed, err = r.add(victim, point)
		} else {
			c, fe := r.cni(point)
			err = c.DelNetworkList(context.Background(), r.cn.list, victim.rt)
			killed = fe.killed.Load()
		}
		if !killed {
			t.Fatalf("fault point %s not reached: %s: %v", point, verb, err)
		}
		what := ""
		restored := false
		switch outcome {
		case "retry ADD":
			if _, err := r.add(victim, ""); err != nil {
				t.Errorf("retried ADD: %v", err)
				r.gc(keep...)
				break
			}
			r.assertOnly(append(keep, victim))
			r.check(victim)
			r.del(victim)
			restored = true
			what = "ADD ok, no duplicate, CHECK ok, DEL x2 ok"
		case "DEL":
			r.del(victim)
			restored = true
			what = "DEL x2 ok"
		case "DEL after the netns is gone":
			removeNS(t, victim.netns)
			victim.rt.NetNS = ""
			r.del(victim)
			what = "DEL x2 without netns ok"
		case "GC":
			r.gc(keep...)
			what = "GC ok"
		case "GC after the netns is gone":
			removeNS(t, victim.netns)
			r.gc(keep...)
			what = "GC without netns ok"
		case "GC, libcni cache lost":
			r.dropCache(victim)
			r.gc(keep...)
			what = "GC without cache entry ok"
		}
		if restored && r.cn.tuning {
			if v := r.podSysctl(victim, "net.core.somaxconn"); v != victim.somax {
				t.Errorf("after DEL the pod's net.core.somaxconn is %s, want %s as before ADD (tuning did not restore it)", v, victim.somax)
			}
		}
		r.assertOnly(keep, victim)
		r.check(bystander)
		r.del(bystander)
		r.assertOnly(nil, victim, bystander)
		if t.Failed() {
			what = "FAILED (see the test log)"
		} else {
			what += "; nothing left"
		}
		mu.Lock()
		runs++
		table[fam.name] = append(table[fam.name], fmt.Sprintf("| `%s` | %s killed, then %s | %s |", point, verb, outcome, what))
		mu.Unlock()
	}

	t.Run("families", func(t *testing.T) {
		for _, fam := range crashFamilies {
			t.Run(fam.name, func(t *testing.T) {
				t.Parallel()
				i := 0
				for _, pair := range crashPairs(t, fam.addPoints, chainAddOutcomes) {
					i++
					point, outcome := pair[0], pair[1]
					t.Run("ADD "+point+" then "+outcome, func(t *testing.T) { scenario(t, fam, i, point, "ADD", outcome) })
				}
				for _, pair := range crashPairs(t, fam.delPoints, chainDelOutcomes) {
					i++
					point, outcome := pair[0], pair[1]
					t.Run("DEL "+point+" then "+outcome, func(t *testing.T) { scenario(t, fam, i, point, "DEL", outcome) })
				}
			})
		}
	})
	if out, code := shared.cnibox("store", "check", "--data-dir", shared.dataDir); code != 0 {
		t.Errorf("cnibox store check: exit %d\n%s", code, out)
	}
	var out []string
	for _, fam := range crashFamilies {
		out = append(out, fmt.Sprintf("%s (%d runs):", fam.name, len(table[fam.name])))
		out = append(out, table[fam.name]...)
	}
	t.Logf("fault point x runtime action -> outcome (%d runs):\n%s", runs, strings.Join(out, "\n"))
}
