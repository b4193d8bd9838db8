package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/store"
)

// exampleConf is the default example network, as a file of a conf dir.
func exampleConf(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repoFile("examples", "10-bridge.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func bootID(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCLIInspectConfig: the active conflist is the first loadable by file
// name, a broken earlier one is reported, every plugin (and the IPAM plugin)
// is found as a link to cnibox and speaks the version; a missing plugin makes
// the config invalid and the exit code 1.
func TestCLIInspectConfig(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{
		"05-broken.conflist": `{"cniVersion": "1.0.0", "name": `,
		"10-bridge.conflist": exampleConf(t),
		"20-other.conf":      `{"cniVersion": "1.0.0", "name": "other", "type": "loopback"}`,
	})
	var rep struct {
		ConfDir string `json:"confDir"`
		BinDir  string `json:"binDir"`
		Files   []struct {
			File, Network, CNIVersion, Error string
			Plugins                          []string
		} `json:"files"`
		Active *struct {
			File       string   `json:"file"`
			Network    string   `json:"network"`
			CNIVersion string   `json:"cniVersion"`
			Plugins    []string `json:"plugins"`
		} `json:"active"`
		Reason       string   `json:"reason"`
		Valid        bool     `json:"valid"`
		Error        string   `json:"error"`
		Capabilities []string `json:"capabilities"`
		Plugins      []struct {
			Type, Kind, Path, Target, Error string
			Versions                        []string
		} `json:"plugins"`
	}
	e.cliJSON(&rep, 0, "inspect", "config", "--conf-dir", conf, "--bin-dir", e.binDir)
	if rep.ConfDir != conf || rep.BinDir != e.binDir {
		t.Errorf("confDir %q binDir %q", rep.ConfDir, rep.BinDir)
	}
	a := rep.Active
	if a == nil || a.File != filepath.Join(conf, "10-bridge.conflist") || a.Network != "cnibox" || a.CNIVersion != "1.1.0" ||
		!slices.Equal(a.Plugins, []string{"bridge", "loopback"}) {
		t.Fatalf("active = %+v, want 10-bridge.conflist (cnibox, 1.1.0, bridge+loopback)", a)
	}
	if !rep.Valid || rep.Error != "" {
		t.Errorf("valid %v error %q, want valid", rep.Valid, rep.Error)
	}
	if !strings.Contains(rep.Reason, "05-broken.conflist") || !strings.Contains(rep.Reason, "file name order") {
		t.Errorf("reason %q: want the order rule and the skipped broken file", rep.Reason)
	}
	if len(rep.Files) != 3 || rep.Files[0].Error == "" || rep.Files[1].Error != "" || rep.Files[2].Network != "other" {
		t.Errorf("files = %+v", rep.Files)
	}
	bin, _ := filepath.EvalSymlinks(filepath.Join(e.binDir, "cnibox")) // cnibox install copies the binary there
	wantPlugins := []struct{ typ, kind string }{{"bridge", "plugin"}, {"host-local", "ipam"}, {"loopback", "plugin"}}
	if len(rep.Plugins) != len(wantPlugins) {
		t.Fatalf("plugins = %+v", rep.Plugins)
	}
	for i, w := range wantPlugins {
		p := rep.Plugins[i]
		if p.Type != w.typ || p.Kind != w.kind || p.Path != filepath.Join(e.binDir, w.typ) || p.Error != "" ||
			!slices.Contains(p.Versions, "1.1.0") || !slices.Contains(p.Versions, "0.3.0") {
			t.Errorf("plugin %d = %+v, want %s (%s) in %s speaking 0.3.0..1.1.0", i, p, w.typ, w.kind, e.binDir)
		}
		if target, _ := filepath.EvalSymlinks(p.Path); target != bin {
			t.Errorf("plugin %s resolves to %s, want %s", p.Type, target, bin)
		}
	}

	out, _, code := e.cliRun("inspect", "config", "--conf-dir", conf, "--bin-dir", e.binDir)
	if code != 0 || !strings.Contains(out, "active") || !strings.Contains(out, "10-bridge.conflist") || !strings.Contains(out, "valid") {
		t.Errorf("inspect config (table): exit %d\n%s", code, out)
	}

	if err := os.Remove(filepath.Join(e.binDir, "host-local")); err != nil {
		t.Fatal(err)
	}
	e.cliJSON(&rep, 1, "inspect", "config", "--conf-dir", conf, "--bin-dir", e.binDir)
	if rep.Valid || rep.Plugins[1].Type != "host-local" || !strings.Contains(rep.Plugins[1].Error, "not found") {
		t.Errorf("without host-local: valid %v plugins %+v", rep.Valid, rep.Plugins)
	}
}

// TestCLIInspectEndpoints: --json carries every field of the record, checked
// against the ADD result and the kernel; the filters select; --detail shows
// the live state.
func TestCLIInspectEndpoints(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "10-bridge.conflist"))
	a, b := e.newPod("a"), e.newPod("b")
	a.rt.Args = append(a.rt.Args, [2]string{"K8S_POD_UID", "uid-of-a"})
	ra := e.add(l, a)
	e.add(l, b)
	defer e.del(l, a)
	defer e.del(l, b)
	start := time.Now()

	var eps []store.Endpoint
	e.cliJSON(&eps, 0, "inspect", "endpoints", "--pod", "default/a")
	if len(eps) != 1 {
		t.Fatalf("--pod default/a: %d endpoints, want 1: %+v", len(eps), eps)
	}
	ep := eps[0]
	ipa := podIP(t, ra, true)
	want := store.Endpoint{
		Network: "cnibox", ContainerID: a.id, IfName: "eth0", Netns: a.netns,
		PodNamespace: "default", PodName: "a", PodUID: "uid-of-a", Plugin: "bridge", Bridge: "cnibox0",
		HostVeth: bridge.HostVethName(a.id, "eth0"), MAC: ra.Interfaces[2].Mac,
		IPs:      []netip.Prefix{netip.PrefixFrom(ipa, 24)},
		Gateways: []netip.Addr{netip.MustParseAddr("10.88.7.1")},
		Routes:   []store.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.88.7.1")}},
		BootID:   bootID(t), Extra: map[string]string{"ipMasq": "true"},
	}
	check := func(field string, got, want any) {
		t.Helper()
		if !equalJSONish(got, want) {
			t.Errorf("endpoint %s = %v, want %v", field, got, want)
		}
	}
	check("network", ep.Network, want.Network)
	check("containerID", ep.ContainerID, want.ContainerID)
	check("ifName", ep.IfName, want.IfName)
	check("netns", ep.Netns, want.Netns)
	check("podNamespace", ep.PodNamespace, want.PodNamespace)
	check("podName", ep.PodName, want.PodName)
	check("podUID", ep.PodUID, want.PodUID)
	check("plugin", ep.Plugin, want.Plugin)
	check("bridge", ep.Bridge, want.Bridge)
	check("hostVeth", ep.HostVeth, want.HostVeth)
	check("mac", ep.MAC, want.MAC)
	check("ips", ep.IPs, want.IPs)
	check("gateways", ep.Gateways, want.Gateways)
	check("routes", ep.Routes, want.Routes)
	check("dns", ep.DNS, want.DNS)
	check("bootID", ep.BootID, want.BootID)
	check("extra", ep.Extra, want.Extra)
	if ep.Created.IsZero() || ep.Created.After(start) || start.Sub(ep.Created) > time.Minute {
		t.Errorf("endpoint created = %v, want shortly before %v", ep.Created, start)
	}
	if !hasLink(t, ep.HostVeth) {
		t.Errorf("host veth %s of the record is not on the node", ep.HostVeth)
	}

	e.cliJSON(&eps, 0, "inspect", "endpoints")
	if len(eps) != 2 {
		t.Errorf("all endpoints: %d, want 2", len(eps))
	}
	e.cliJSON(&eps, 0, "inspect", "endpoints", "--network", "other")
	if len(eps) != 0 {
		t.Errorf("--network other: %d endpoints, want 0", len(eps))
	}
	e.cliJSON(&eps, 0, "inspect", "endpoints", "--container", b.id[:3])
	if len(eps) != 1 || eps[0].ContainerID != b.id {
		t.Errorf("--container %s: %+v", b.id[:3], eps)
	}
	out, _, code := e.cliRun("inspect", "endpoints", "--pod", "default/a", "--detail")
	for _, s := range []string{"endpoint cnibox/" + a.id + "/eth0", "uid-of-a", want.HostVeth, ipa.String(), "ipMasq=true", "netns present, host veth up"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("--detail lacks %q (exit %d):\n%s", s, code, out)
		}
	}
	out, _, _ = e.cliRun("inspect", "endpoints")
	if !strings.Contains(out, "default/a") || !strings.Contains(out, "default/b") || !strings.Contains(out, "HOST VETH") {
		t.Errorf("endpoints table:\n%s", out)
	}
}

// equalJSONish compares values by their printed form (netip types and
// slices of them compare by value).
func equalJSONish(a, b any) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// TestCLIInspectIPAM: the configured range with its size, use and cursor,
// and every reservation with its owner, pod, endpoint and netns.
func TestCLIInspectIPAM(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-bridge.conflist": exampleConf(t)})
	l := loadList(t, filepath.Join(conf, "10-bridge.conflist"))
	a, b := e.newPod("a"), e.newPod("b")
	ra, rb := e.add(l, a), e.add(l, b)
	defer e.del(l, a)
	defer e.del(l, b)
	ipa, ipb := podIP(t, ra, true), podIP(t, rb, true)

	type reservation struct {
		Addr        netip.Addr   `json:"addr"`
		Subnet      netip.Prefix `json:"subnet"`
		ContainerID string       `json:"containerID"`
		IfName      string       `json:"ifName"`
		Pod         string       `json:"pod"`
		Created     time.Time    `json:"created"`
		BootID      string       `json:"bootID"`
		EarlierBoot bool         `json:"earlierBoot"`
		Endpoint    bool         `json:"endpoint"`
		Netns       string       `json:"netns"`
	}
	var nets []struct {
		Network string `json:"network"`
		Pools   []struct {
			Range         string       `json:"range"`
			Subnet        netip.Prefix `json:"subnet"`
			Gateway       netip.Addr   `json:"gateway"`
			Source        string       `json:"source"`
			Size          uint64       `json:"size"`
			Used          uint64       `json:"used"`
			Free          uint64       `json:"free"`
			LastAllocated netip.Addr   `json:"lastAllocated"`
		} `json:"pools"`
		Reservations []reservation `json:"reservations"`
	}
	e.cliJSON(&nets, 0, "inspect", "ipam", "--conf-dir", conf)
	if len(nets) != 1 || nets[0].Network != "cnibox" {
		t.Fatalf("networks = %+v, want cnibox only", nets)
	}
	n := nets[0]
	if len(n.Pools) != 1 {
		t.Fatalf("pools = %+v, want the one configured range", n.Pools)
	}
	p := n.Pools[0]
	if p.Range != "10.88.7.1-10.88.7.254" || p.Subnet != netip.MustParsePrefix("10.88.7.0/24") || p.Gateway != netip.MustParseAddr("10.88.7.1") ||
		p.Source != filepath.Join(conf, "10-bridge.conflist") || p.Size != 253 || p.Used != 2 || p.Free != 251 || p.LastAllocated != ipb {
		t.Errorf("pool = %+v, want 10.88.7.1-10.88.7.254 of 10.88.7.0/24 gw .1 from the conflist, 253 = 2 used + 251 free, last %s", p, ipb)
	}
	if len(n.Reservations) != 2 {
		t.Fatalf("reservations = %+v", n.Reservations)
	}
	for i, w := range []struct {
		ip  netip.Addr
		pod *pod
		nm  string
	}{{ipa, a, "default/a"}, {ipb, b, "default/b"}} {
		r := n.Reservations[i]
		if r.Addr != w.ip || r.Subnet != netip.MustParsePrefix("10.88.7.0/24") || r.ContainerID != w.pod.id || r.IfName != "eth0" ||
			r.Pod != w.nm || !r.Endpoint || r.Netns != w.pod.netns || r.BootID != bootID(t) || r.EarlierBoot || r.Created.IsZero() {
			t.Errorf("reservation %d = %+v, want %s of %s (%s) with its endpoint in %s", i, r, w.ip, w.pod.id, w.nm, w.pod.netns)
		}
	}
	out, _, code := e.cliRun("inspect", "ipam", "--conf-dir", conf)
	if code != 0 || !strings.Contains(out, "network cnibox") || !strings.Contains(out, "253") || !strings.Contains(out, ipa.String()) {
		t.Errorf("inspect ipam (table): exit %d\n%s", code, out)
	}
}

// TestCLIInspectTopology: the bridge with its address and the pods' veths
// behind it, as JSON, a tree and Graphviz dot.
func TestCLIInspectTopology(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "10-bridge.conflist"))
	a := e.newPod("a")
	ra := e.add(l, a)
	defer e.del(l, a)
	veth := bridge.HostVethName(a.id, "eth0")

	type topoPod struct {
		Network     string         `json:"network"`
		ContainerID string         `json:"containerID"`
		IfName      string         `json:"ifName"`
		Pod         string         `json:"pod"`
		Netns       string         `json:"netns"`
		NetnsExists bool           `json:"netnsExists"`
		IPs         []netip.Prefix `json:"ips"`
		MAC         string         `json:"mac"`
	}
	type topoBridge struct {
		Name  string         `json:"name"`
		Up    bool           `json:"up"`
		MTU   int            `json:"mtu"`
		Addrs []netip.Prefix `json:"addrs"`
		Ports []struct {
			Name string   `json:"name"`
			Kind string   `json:"kind"`
			Up   bool     `json:"up"`
			Pod  *topoPod `json:"pod"`
		} `json:"ports"`
	}
	var topo struct {
		Bridges  []topoBridge `json:"bridges"`
		Overlays []any        `json:"overlays"`
	}
	e.cliJSON(&topo, 0, "inspect", "topology")
	i := slices.IndexFunc(topo.Bridges, func(b topoBridge) bool { return b.Name == "cnibox0" })
	if i < 0 {
		t.Fatalf("no bridge cnibox0 in %+v", topo.Bridges)
	}
	br := topo.Bridges[i]
	if !br.Up || br.MTU == 0 || !slices.Contains(br.Addrs, netip.MustParsePrefix("10.88.7.1/24")) {
		t.Errorf("bridge = up %v mtu %d addrs %v, want up with 10.88.7.1/24", br.Up, br.MTU, br.Addrs)
	}
	found := false
	for _, p := range br.Ports {
		if p.Name != veth {
			continue
		}
		found = true
		if p.Kind != "veth" || !p.Up || p.Pod == nil {
			t.Fatalf("port %s = %+v", veth, p)
		}
		pd := p.Pod
		if pd.Network != "cnibox" || pd.ContainerID != a.id || pd.IfName != "eth0" || pd.Pod != "default/a" || pd.Netns != a.netns ||
			!pd.NetnsExists || len(pd.IPs) != 1 || pd.IPs[0].Addr() != podIP(t, ra, true) || pd.MAC != ra.Interfaces[2].Mac {
			t.Errorf("pod behind %s = %+v", veth, pd)
		}
	}
	if !found {
		t.Errorf("veth %s not among the ports of cnibox0: %+v", veth, br.Ports)
	}
	out, _, code := e.cliRun("inspect", "topology")
	if code != 0 || !strings.Contains(out, "bridge cnibox0") || !strings.Contains(out, veth) || !strings.Contains(out, "pod default/a") {
		t.Errorf("topology tree: exit %d\n%s", code, out)
	}
	out, _, code = e.cliRun("inspect", "topology", "--format", "dot")
	if code != 0 || !strings.HasPrefix(out, "digraph cnibox {") || !strings.Contains(out, `"br:cnibox0" -> "if:`+veth+`"`) {
		t.Errorf("topology dot: exit %d\n%s", code, out)
	}
}

// doctorResult is one line of `cnibox doctor --json`.
type doctorResult struct {
	Check   string `json:"check"`
	Subject string `json:"subject"`
	Pod     string `json:"pod"`
	Status  string `json:"status"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix"`
}

// TestCLIDoctor: every check passes on a healthy node; after each kind of
// damage, doctor exits 1 and its failing line names the broken thing (and
// says how to fix it), while the other pod stays healthy.
func TestCLIDoctor(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-bridge.conflist": exampleConf(t)})
	l := loadList(t, filepath.Join(conf, "10-bridge.conflist"))
	doctor := func(e *env, want int, args ...string) []doctorResult {
		e.t.Helper()
		var rs []doctorResult
		e.cliJSON(&rs, want, append([]string{"doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir}, args...)...)
		return rs
	}
	healthy := e.newPod("healthy")
	e.add(l, healthy)
	defer e.del(l, healthy)

	t.Run("healthy", func(t *testing.T) {
		e := e.withT(t)
		p := e.newPod("fine")
		e.add(l, p)
		defer e.del(l, p)
		rs := doctor(e, 0)
		checks := map[string]bool{}
		for _, r := range rs {
			if r.Status == "fail" {
				t.Errorf("failed on a healthy node: %+v", r)
			}
			checks[r.Check] = true
		}
		for _, c := range []string{"config", "plugins", "bridge", "forwarding", "netns", "host veth", "interface", "address", "default route", "gateway", "masquerade", "mtu", "leftovers"} {
			if !checks[c] {
				t.Errorf("no %q check in %+v", c, rs)
			}
		}
		out, _, code := e.cliRun("doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--pod", "default/fine")
		if code != 0 || !strings.Contains(out, "PASS") || strings.Contains(out, "FAIL") || !strings.Contains(out, "checks passed") {
			t.Errorf("doctor --pod default/fine: exit %d\n%s", code, out)
		}
	})

	for _, tc := range []struct {
		name  string
		check string
		// breakIt damages the pod and returns the text the failing line
		// must contain.
		breakIt func(t *testing.T, p *pod, ip netip.Addr) string
	}{
		{"host veth deleted", "host veth", func(t *testing.T, p *pod, _ netip.Addr) string {
			v := bridge.HostVethName(p.id, "eth0")
			if err := hostHandle(t).DeleteLink(v); err != nil {
				t.Fatal(err)
			}
			return v
		}},
		{"default route deleted", "default route", func(t *testing.T, p *pod, _ netip.Addr) string {
			h, err := netops.Open(p.netns)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if err := h.DeleteRoute(netops.Route{GW: netip.MustParseAddr("10.88.7.1"), Dev: "eth0"}); err != nil {
				t.Fatal(err)
			}
			return "default via 10.88.7.1"
		}},
		{"ip_forward off", "forwarding", func(t *testing.T, _ *pod, _ netip.Addr) string {
			// The test process's namespace is the private "node" (TestMain).
			h := hostHandle(t)
			if err := h.SetSysctl("net.ipv4.ip_forward", "0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.SetSysctl("net.ipv4.ip_forward", "1") })
			return "net.ipv4.ip_forward is 0"
		}},
		{"masquerade entry deleted", "masquerade", func(t *testing.T, _ *pod, ip netip.Addr) string {
			if err := hostHandle(t).NFT().DeleteMasq([]netip.Addr{ip}); err != nil {
				t.Fatal(err)
			}
			return ip.String()
		}},
		{"bridge MAC changed", "gateway", func(t *testing.T, _ *pod, _ netip.Addr) string {
			// The pod resolved the gateway at the first doctor run; a new
			// bridge MAC leaves its neighbour entry pointing at the old one.
			h := hostHandle(t)
			mac := net.HardwareAddr{0x02, 0xcb, 0x0c, 0x11, 0x00, 0x02}
			if err := h.SetMAC("cnibox0", mac); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pinBridgeMAC(t, "cnibox0") })
			return "now has MAC " + mac.String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.withT(t)
			p := e.newPod("broken")
			ip := podIP(t, e.add(l, p), true)
			defer e.del(l, p)
			if rs := doctor(e, 0, "--pod", "default/broken"); len(rs) == 0 {
				t.Fatal("no checks")
			}
			name := tc.breakIt(t, p, ip)
			rs := doctor(e, 1, "--pod", "default/broken")
			var fails []doctorResult
			for _, r := range rs {
				if r.Status == "fail" {
					fails = append(fails, r)
				}
			}
			if len(fails) == 0 || fails[0].Check != tc.check || !strings.Contains(fails[0].Detail, name) || fails[0].Fix == "" {
				t.Errorf("first failure = %+v, want check %q naming %q with a fix; all failures: %+v", first(fails), tc.check, name, fails)
			}
			out, _, code := e.cliRun("doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--pod", "default/broken")
			if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, name) || !strings.Contains(out, "fix:") {
				t.Errorf("doctor text: exit %d, want 1 with a FAIL line naming %q and a fix:\n%s", code, name, out)
			}
			// The other pod is unaffected.
			if tc.check != "forwarding" && tc.check != "gateway" {
				if rs := doctor(e, 0, "--pod", "default/healthy"); len(rs) == 0 {
					t.Error("no checks for the healthy pod")
				}
			}
		})
	}
}

func first(rs []doctorResult) doctorResult {
	if len(rs) == 0 {
		return doctorResult{}
	}
	return rs[0]
}

// TestCLIGC: gc removes exactly the planted leftovers (a pod whose netns
// vanished without DEL, a host-local-only attachment whose netns is gone per
// libcni's cache, a reservation from an earlier boot, a stray cbx veth, a
// stray masquerade entry) and keeps everything live or possibly in flight.
func TestCLIGC(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "10-bridge.conflist"))
	// host-local as the only plugin: reservations without endpoint records.
	hl := listFromJSON(t, `{"cniVersion": "1.1.0", "name": "hl", "plugins": [
		{"type": "host-local", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24"}]]}}]}`)
	h := hostHandle(t)

	// Kept: a live pod, a live host-local-only attachment, an ADD "in
	// flight" (reserved, veth made, no record yet), a veth that is not ours.
	live := e.newPod("live")
	liveIP := podIP(t, e.add(l, live), true)
	defer e.del(l, live)
	hlLive := e.newPod("hl-live")
	hlLiveIP := podIP(t, e.add(hl, hlLive), true)
	defer e.del(hl, hlLive)

	// Stale: a pod whose namespace vanished without DEL.
	gone, vanish := e.newPodOwnNS("gone")
	goneIP := podIP(t, e.add(l, gone), true)
	vanish()
	waitLinkGone(t, bridge.HostVethName(gone.id, "eth0"))
	// Stale: a host-local-only attachment whose namespace vanished.
	hlGone, hlVanish := e.newPodOwnNS("hl-gone")
	hlGoneIP := podIP(t, e.add(hl, hlGone), true)
	hlVanish()

	st, err := store.Open(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	oldIP, flightIP := netip.MustParseAddr("10.88.7.200"), netip.MustParseAddr("10.88.7.201")
	err = st.IPAM("cnibox", func(tx *store.IPAMTx) error {
		if err := tx.Reserve(store.Reservation{Addr: oldIP, ContainerID: "before-reboot", IfName: "eth0", BootID: "an-earlier-boot"}); err != nil {
			return err
		}
		return tx.Reserve(store.Reservation{Addr: flightIP, ContainerID: "in-flight", IfName: "eth0"})
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	peer := netops.VethOpts{PeerName: "gcpeer0", Peer: h}
	mkVeth := func(name, peerName string) {
		o := peer
		o.HostName, o.PeerName = name, peerName
		if _, _, err := h.EnsureVeth(o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.DeleteLink(name) })
	}
	flightVeth := bridge.HostVethName("in-flight", "eth0")
	mkVeth(flightVeth, "gcpeer1")
	mkVeth("cbx0123456789ab", "gcpeer2") // stray
	mkVeth("vethkeep0", "gcpeer3")       // not ours
	strayMasq := netip.MustParseAddr("10.88.7.250")
	if err := h.NFT().EnsureMasq("cnibox", []netip.Prefix{netip.PrefixFrom(strayMasq, 24)}); err != nil {
		t.Fatal(err)
	}

	type orphan struct {
		Kind        string     `json:"kind"`
		Network     string     `json:"network"`
		ContainerID string     `json:"containerID"`
		Addr        netip.Addr `json:"addr"`
		Veth        string     `json:"veth"`
		Reason      string     `json:"reason"`
		Done        bool       `json:"done"`
		Error       string     `json:"error"`
	}
	key := func(o orphan) string {
		switch o.Kind {
		case "endpoint":
			return "endpoint " + o.ContainerID
		case "veth":
			return "veth " + o.Veth
		}
		return o.Kind + " " + o.Network + " " + o.Addr.String()
	}
	want := []string{
		"endpoint " + gone.id,
		"reservation cnibox " + goneIP.String(),
		"reservation cnibox " + oldIP.String(),
		"reservation hl " + hlGoneIP.String(),
		"veth cbx0123456789ab",
		"masquerade cnibox " + goneIP.String(),
		"masquerade cnibox " + strayMasq.String(),
	}
	gc := func(done bool, args ...string) {
		t.Helper()
		var got []orphan
		e.cliJSON(&got, 0, append([]string{"gc", "--cache-dir", e.cacheDir}, args...)...)
		var keys []string
		for _, o := range got {
			keys = append(keys, key(o))
			if o.Done != done || o.Error != "" || o.Reason == "" {
				t.Errorf("gc %v: %+v: want done=%v, a reason and no error", args, o, done)
			}
		}
		slices.Sort(keys)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(keys, w) {
			t.Errorf("gc %v found\n  %s\nwant\n  %s", args, strings.Join(keys, "\n  "), strings.Join(w, "\n  "))
		}
	}
	state := func() (eps []string, res []netip.Addr, veths []string, masq []netip.Addr) {
		st, err := store.Open(e.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := st.Endpoints("")
		st.Close()
		for _, ep := range all {
			eps = append(eps, ep.ContainerID)
		}
		for _, n := range []string{"cnibox", "hl"} {
			for _, r := range e.reservations(n) {
				res = append(res, r.Addr)
			}
		}
		for _, v := range []string{flightVeth, "cbx0123456789ab", "vethkeep0", bridge.HostVethName(live.id, "eth0")} {
			if hasLink(t, v) {
				veths = append(veths, v)
			}
		}
		return eps, res, veths, masqEntries(t)
	}
	eps0, res0, veths0, masq0 := state()

	gc(false, "--dry-run")
	eps1, res1, veths1, masq1 := state()
	if !slices.Equal(eps0, eps1) || !slices.Equal(res0, res1) || !slices.Equal(veths0, veths1) || !slices.Equal(masq0, masq1) {
		t.Fatalf("gc --dry-run changed the node:\n%v %v %v %v\n%v %v %v %v", eps0, res0, veths0, masq0, eps1, res1, veths1, masq1)
	}

	gc(true)
	eps2, res2, veths2, masq2 := state()
	if want := []string{live.id}; !slices.Equal(eps2, want) {
		t.Errorf("endpoints after gc = %v, want %v", eps2, want)
	}
	slices.SortFunc(res2, netip.Addr.Compare)
	wantRes := []netip.Addr{hlLiveIP, liveIP, flightIP}
	slices.SortFunc(wantRes, netip.Addr.Compare)
	if !slices.Equal(res2, wantRes) {
		t.Errorf("reservations after gc = %v, want %v", res2, wantRes)
	}
	if want := []string{flightVeth, "vethkeep0", bridge.HostVethName(live.id, "eth0")}; !slices.Equal(veths2, want) {
		t.Errorf("veths after gc = %v, want %v", veths2, want)
	}
	if want := []netip.Addr{liveIP}; !slices.Equal(masq2, want) {
		t.Errorf("masquerade entries after gc = %v, want %v", masq2, want)
	}

	want = nil
	gc(false)
	out, _, code := e.cliRun("gc", "--cache-dir", e.cacheDir)
	if code != 0 || !strings.Contains(out, "nothing to clean up") {
		t.Errorf("a second gc: exit %d\n%s", code, out)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, live.rt); err != nil {
		t.Errorf("CHECK of the live pod after gc: %v", err)
	}
}

// TestCLICompletion: the completion script loads in bash, and the binary
// answers a completion request with the subcommands.
func TestCLICompletion(t *testing.T) {
	e := newEnv(t)
	out, _, code := e.cliRun("inspect", "--generate-bash-completion")
	for _, w := range []string{"config", "endpoints", "ipam", "topology"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("cnibox inspect --generate-bash-completion lacks %q (exit %d):\n%s", w, code, out)
		}
	}
	script, _, code := e.cliRun("completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	nstest.RequireProgram(t, "bash", "bash")
	cmd := exec.Command("bash", "--norc", "-c", script+"\ncomplete -p cnibox")
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "_cnibox_bash_autocomplete") {
		t.Errorf("bash does not load the script: %v\n%s", err, b)
	}
}

// TestCLIOverlay: with an overlay recorded by the agent and programmed in
// the kernel, doctor passes the device and the peer and topology shows them;
// with the peer's FDB entry gone, doctor fails naming it.
func TestCLIOverlay(t *testing.T) {
	e := newEnv(t)
	conf := e.confDir(map[string]string{"10-bridge.conflist": exampleConf(t)})
	h := hostHandle(t)
	const dev, under = "cbxvx.1", "cbxund0"
	if _, err := h.EnsureBridge(bridgeOpts(under)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.DeleteLink(dev); h.DeleteLink(under) })
	if err := h.EnsureAddr(under, netip.MustParsePrefix("192.0.2.1/24"), addrOpts()); err != nil {
		t.Fatal(err)
	}
	vtep := net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 1}
	if _, _, err := h.EnsureVXLAN(netops.VXLANOpts{Name: dev, VNI: 42, Local: netip.MustParseAddr("192.0.2.1"), Dev: under, MTU: 1450, MAC: vtep}); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureAddr(dev, netip.MustParsePrefix("10.244.1.0/32"), addrOpts()); err != nil {
		t.Fatal(err)
	}
	peerMAC := net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 2}
	peerSubnet, peerIP := netip.MustParsePrefix("10.244.2.0/24"), netip.MustParseAddr("192.0.2.2")
	if err := h.EnsureNeigh(dev, peerSubnet.Addr(), peerMAC); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureFDB(dev, peerMAC, peerIP); err != nil {
		t.Fatal(err)
	}
	if err := h.EnsureRoute(netops.Route{Dst: peerSubnet, GW: peerSubnet.Addr(), Dev: dev, Onlink: true}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	err = st.PutOverlay(store.OverlayState{
		Lease: store.OverlayLease{Backend: "etcd", Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.1.0/24"),
			PublicIP: netip.MustParseAddr("192.0.2.1"), Iface: under, Device: dev, VNI: 42, Port: 8472, VTEPMAC: vtep.String(), MTU: 1450},
		Peers: []store.OverlayPeer{{Subnet: peerSubnet, PublicIP: peerIP, VTEPMAC: peerMAC.String()}},
		Ready: true, LastSync: time.Now(),
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	doctor := func(want int) []doctorResult {
		t.Helper()
		var rs []doctorResult
		e.cliJSON(&rs, want, "doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir)
		return rs
	}
	status := func(rs []doctorResult, check string) (string, string) {
		for _, r := range rs {
			if r.Check == check {
				return r.Status, r.Detail
			}
		}
		return "", ""
	}
	rs := doctor(0)
	for _, c := range []string{"overlay", "peer"} {
		if s, d := status(rs, c); s != "pass" {
			t.Errorf("check %s: %s %q, want pass", c, s, d)
		}
	}

	var topo struct {
		Overlays []struct {
			Device string `json:"device"`
			Kind   string `json:"kind"`
			Up     bool   `json:"up"`
			MTU    int    `json:"mtu"`
			VNI    int    `json:"vni"`
			Local  string `json:"local"`
			Lease  *struct {
				Subnet string `json:"subnet"`
			} `json:"lease"`
			Peers []struct {
				Subnet   string `json:"subnet"`
				PublicIP string `json:"publicIP"`
				VTEPMAC  string `json:"vtepMAC"`
			} `json:"peers"`
			Ready bool `json:"ready"`
		} `json:"overlays"`
	}
	e.cliJSON(&topo, 0, "inspect", "topology")
	if len(topo.Overlays) != 1 {
		t.Fatalf("overlays = %+v, want %s", topo.Overlays, dev)
	}
	o := topo.Overlays[0]
	if o.Device != dev || o.Kind != "vxlan" || !o.Up || o.MTU != 1450 || o.VNI != 42 || o.Local != "192.0.2.1" || !o.Ready ||
		o.Lease == nil || o.Lease.Subnet != "10.244.1.0/24" || len(o.Peers) != 1 || o.Peers[0].Subnet != peerSubnet.String() ||
		o.Peers[0].PublicIP != peerIP.String() || o.Peers[0].VTEPMAC != peerMAC.String() {
		t.Errorf("overlay = %+v", o)
	}
	out, _, _ := e.cliRun("inspect", "topology")
	if !strings.Contains(out, "vxlan "+dev) || !strings.Contains(out, "peer 10.244.2.0/24 at 192.0.2.2") {
		t.Errorf("topology tree lacks the overlay:\n%s", out)
	}

	// A pod of the cluster network with a larger MTU than the overlay's.
	ovl := listFromJSON(t, `{"cniVersion": "1.1.0", "name": "ovl", "plugins": [{"type": "bridge", "bridge": "cbxovbr0",
		"isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}]]}}]}`)
	p := e.newPod("ov")
	e.add(ovl, p)
	t.Cleanup(func() { h.DeleteLink("cbxovbr0") })
	var prs []doctorResult
	e.cliJSON(&prs, 1, "doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--pod", "default/ov")
	if s, d := status(prs, "mtu"); s != "fail" || !strings.Contains(d, "overlay "+dev+" has mtu 1450") {
		t.Errorf("mtu check of a 1500 pod on a 1450 overlay: %s %q", s, d)
	}
	e.del(ovl, p)
	e.del(ovl, p)

	if err := h.DeleteFDB(dev, peerMAC, peerIP); err != nil {
		t.Fatal(err)
	}
	rs = doctor(1)
	if s, d := status(rs, "peer"); s != "fail" || !strings.Contains(d, "fdb "+peerMAC.String()+" dst "+peerIP.String()) {
		t.Errorf("peer check without its FDB entry: %s %q", s, d)
	}
}
