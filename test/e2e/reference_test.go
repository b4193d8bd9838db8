package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

// refDir holds the reference plugins (Debian's containernetworking-plugins).
const refDir = "/usr/lib/cni"

// refVersions are the spec versions compared: kind's 0.3.1 and the newest
// that Debian's reference plugins (1.1.1) speak.
var refVersions = []string{"0.3.1", "1.0.0"}

// sideView is what a user sees of one attachment, with the names and MACs
// that differ by design replaced: the ADD result, the pod's interface (kind,
// MTU), addresses and routes, and the host end's MTU, addresses and routes
// on the node.
type sideView struct {
	Result     string
	PodLink    string
	HostLink   string
	PodAddrs   []string
	PodRoutes  []string
	HostAddrs  []string
	HostRoutes []string
}

// side runs ADD through libcni with the plugins of cni, reads the view,
// runs CHECK (from 0.4.0), then DEL twice.
func side(t *testing.T, cni *libcni.CNIConfig, l *libcni.NetworkConfigList, p *pod) sideView {
	t.Helper()
	v := addSide(t, cni, l, p)
	delSide(t, cni, l, p, 2)
	return v
}

// addSide runs ADD through libcni with the plugins of cni, reads the view
// and runs CHECK (from 0.4.0).
func addSide(t *testing.T, cni *libcni.CNIConfig, l *libcni.NetworkConfigList, p *pod) sideView {
	t.Helper()
	ctx := context.Background()
	r, err := cni.AddNetworkList(ctx, l, p.rt)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	v := viewOf(t, res, p)
	if l.CNIVersion >= "0.4.0" {
		if err := cni.CheckNetworkList(ctx, l, p.rt); err != nil {
			t.Errorf("CHECK: %v", err)
		}
	}
	return v
}

// delSide runs DEL times times, each of which must succeed, and fails the
// test if eth0 is left in the pod.
func delSide(t *testing.T, cni *libcni.CNIConfig, l *libcni.NetworkConfigList, p *pod, times int) {
	t.Helper()
	for range times {
		if err := cni.DelNetworkList(context.Background(), l, p.rt); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if names := podLinks(t, p.netns); slices.Contains(names, "eth0") {
		t.Errorf("eth0 left in the pod after DEL: %v", names)
	}
}

// viewOf reads the view of an attachment, host end names as "<host>".
func viewOf(t *testing.T, res *current.Result, p *pod) sideView {
	t.Helper()
	hostEnd := ""
	for _, ifc := range res.Interfaces {
		ifc.Mac = ""
		switch {
		case ifc.Sandbox == p.netns:
			ifc.Sandbox = "<netns>"
		case ifc.Sandbox == "":
			hostEnd, ifc.Name = ifc.Name, "<host>"
		}
	}
	b, _ := json.Marshal(res)
	v := sideView{Result: string(b)}
	pod, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	v.PodLink, v.PodAddrs, v.PodRoutes = linkView(t, pod, "eth0", hostEnd)
	if hostEnd != "" {
		v.HostLink, v.HostAddrs, v.HostRoutes = linkView(t, hostHandle(t), hostEnd, hostEnd)
	}
	return v
}

// linkView describes a link (kind, MTU, up) and lists the addresses and
// routes of a link (without IPv6 link-local ones), sorted, with the name
// hostEnd written "<host>".
func linkView(t *testing.T, h *netops.Handle, link, hostEnd string) (desc string, addrs, routes []string) {
	t.Helper()
	l, err := h.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	desc = fmt.Sprintf("%s mtu %d up %v", l.Kind, l.MTU, l.Up)
	as, err := h.Addrs(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		addrs = append(addrs, a.String())
	}
	rs, err := h.Routes(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Dst.Addr().IsLinkLocalUnicast() {
			continue // fe80::/64: the kernel adds it when the link is up, at its own pace
		}
		if r.Dev == hostEnd {
			r.Dev = "<host>"
		}
		routes = append(routes, r.String())
	}
	slices.Sort(addrs)
	slices.Sort(routes)
	return desc, addrs, routes
}

// compareSides runs the conflist that conf builds (given an IPAM dataDir)
// with the reference plugins and with cnibox, one after the other in fresh
// pods, and fails on any difference of what a user sees.
func compareSides(t *testing.T, conf func(ipamDir string) string) {
	compareSidesWith(t, []string{refDir}, conf)
}

// compareSidesWith is compareSides with the reference plugins looked up in
// the directories refPath.
func compareSidesWith(t *testing.T, refPath []string, conf func(ipamDir string) string) {
	e := newEnv(t)
	ref := libcni.NewCNIConfigWithCacheDir(refPath, t.TempDir(), newExec())
	refView := side(t, ref, listFromJSON(t, conf(t.TempDir())), e.newPod("ref"))
	boxView := side(t, e.cni, listFromJSON(t, conf("")), e.newPod("box"))
	rv, _ := json.MarshalIndent(refView, "", "  ")
	bv, _ := json.MarshalIndent(boxView, "", "  ")
	if string(rv) != string(bv) {
		t.Errorf("the reference and cnibox differ:\nreference:\n%s\ncnibox:\n%s", rv, bv)
	}
	if got := e.reservations(listFromJSON(t, conf("")).Name); len(got) != 0 {
		t.Errorf("cnibox reservations left after DEL: %v", got)
	}
}

func requireReference(t *testing.T, plugin string) {
	t.Helper()
	if _, err := os.Stat(refDir + "/" + plugin); err != nil {
		t.Fatalf("the reference %s plugin is not installed (%v): apt-get install containernetworking-plugins (make deps installs it)", plugin, err)
	}
}

// ipamJSON is a host-local section; dir is the reference's dataDir ("" for
// cnibox, whose store is CNIBOX_DATA_DIR).
func ipamJSON(dir, ranges, routes string) string {
	d := ""
	if dir != "" {
		d = fmt.Sprintf(`"dataDir":%q,`, dir)
	}
	return fmt.Sprintf(`{"type":"host-local",%s"ranges":%s,"routes":%s}`, d, ranges, routes)
}

// TestReferencePtp compares ptp + host-local (kind's network, single and
// dual stack, with an MTU) between the reference and cnibox.
func TestReferencePtp(t *testing.T) {
	requireReference(t, "ptp")
	for _, v := range refVersions {
		for name, ranges := range map[string]string{
			"v4":   `[[{"subnet":"10.244.0.0/24"}]]`,
			"dual": `[[{"subnet":"10.244.0.0/24"}],[{"subnet":"fd00:10:244::/64"}]]`,
		} {
			t.Run(v+"/"+name, func(t *testing.T) {
				compareSides(t, func(dir string) string {
					return fmt.Sprintf(`{"cniVersion":%q,"name":"kindnet","plugins":[{"type":"ptp","ipMasq":false,"mtu":1400,"ipam":%s}]}`,
						v, ipamJSON(dir, ranges, `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`))
				})
			})
		}
	}
}

// TestReferenceMacvlan compares macvlan + host-local on a LAN between the
// reference and cnibox.
func TestReferenceMacvlan(t *testing.T) {
	requireReference(t, "macvlan")
	for _, v := range refVersions {
		for name, ranges := range lanRanges {
			t.Run(v+"/"+name, func(t *testing.T) {
				newRefLAN(t, "lan7")
				compareSides(t, func(dir string) string {
					return fmt.Sprintf(`{"cniVersion":%q,"name":"lan","plugins":[{"type":"macvlan","master":"lan7","mode":"bridge","mtu":1400,"ipam":%s}]}`,
						v, ipamJSON(dir, ranges, lanRoutes))
				})
			})
		}
	}
}

// TestReferenceVlan compares vlan + host-local (VLAN 57 of a NIC, with an
// MTU) between the reference and cnibox. It needs 802.1Q in the kernel:
// make test-kernel runs it.
func TestReferenceVlan(t *testing.T) {
	requireReference(t, "vlan")
	for _, v := range refVersions {
		for name, ranges := range lanRanges {
			t.Run(v+"/"+name, func(t *testing.T) {
				newRefLAN(t, "lan9")
				_, err := hostHandle(t).EnsureVlan(netops.VlanOpts{Name: "probe9", Master: "lan9", ID: 9})
				nstest.SkipIfKernelLacks(t, "802.1Q (8021q)", err)
				if err != nil {
					t.Fatal(err)
				}
				compareSides(t, func(dir string) string {
					return fmt.Sprintf(`{"cniVersion":%q,"name":"vlan57","plugins":[{"type":"vlan","master":"lan9","vlanId":57,"mtu":1400,"ipam":%s}]}`,
						v, ipamJSON(dir, ranges, lanRoutes))
				})
			})
		}
	}
}

// TestReferenceDummy compares dummy + host-local between upstream's
// reference (Debian's 1.1.1 has no dummy) and cnibox. It needs dummy
// devices in the kernel: make test-kernel runs it.
func TestReferenceDummy(t *testing.T) {
	requireKernel(t, "dummy devices (dummy)", func(h *netops.Handle) error {
		_, err := h.EnsureDummy("probe0")
		return err
	})
	compareUpstream(t, "dummy", map[string]string{
		"v4":   `[[{"subnet":"10.56.0.0/24","gateway":"10.56.0.1"}]]`,
		"dual": `[[{"subnet":"10.56.0.0/24","gateway":"10.56.0.1"}],[{"subnet":"fd56::/64","gateway":"fd56::1"}]]`,
	}, func(v, ipam string) string {
		return fmt.Sprintf(`{"cniVersion":%q,"name":"svc","plugins":[{"type":"dummy","ipam":%s}]}`, v, ipam)
	}, `[{"dst":"192.168.56.0/24"},{"dst":"fd00:56::/64"}]`)
}

// requireKernel skips the test when probe, run on a handle of a fresh
// namespace, says the kernel lacks what.
func requireKernel(t *testing.T, what string, probe func(*netops.Handle) error) {
	t.Helper()
	h, err := netops.Open(nstest.NewNS(t, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	err = probe(h)
	nstest.SkipIfKernelLacks(t, what, err)
	if err != nil {
		t.Fatal(err)
	}
}

// compareUpstream compares plugin + host-local between upstream's reference
// and cnibox at each of refVersions for each of ranges (name -> host-local
// "ranges" JSON) with routes: conf builds the conflist at version v around
// the ipam section.
func compareUpstream(t *testing.T, plugin string, ranges map[string]string, conf func(v, ipam string) string, routes string) {
	t.Helper()
	requireReference(t, "host-local")
	path := []string{upstreamRef(t, plugin), refDir}
	for _, v := range refVersions { // Debian's host-local, which the reference calls, speaks up to 1.0.0
		for name, r := range ranges {
			t.Run(v+"/"+name, func(t *testing.T) {
				compareSidesWith(t, path, func(dir string) string {
					return conf(v, ipamJSON(dir, r, routes))
				})
			})
		}
	}
}

// upstreamRef returns the directory of upstream's reference plugins
// (upstream.Version), which TestMain built or found before the test entered
// its namespace; it holds plugin.
func upstreamRef(t *testing.T, plugin string) string {
	t.Helper()
	dir := prepared(t, upstream.DirEnv)
	if _, err := os.Stat(filepath.Join(dir, plugin)); err != nil {
		t.Fatalf("the reference %s %s is not in %s (%v)", plugin, upstream.Version, dir, err)
	}
	return dir
}

// lanRanges are host-local's "ranges" (name -> JSON) on the LAN of
// newRefLAN, single and dual stack, and lanRoutes its routes.
var lanRanges = map[string]string{
	"v4":   `[[{"subnet":"10.57.0.0/24","rangeStart":"10.57.0.10","gateway":"10.57.0.1"}]]`,
	"dual": `[[{"subnet":"10.57.0.0/24","rangeStart":"10.57.0.10","gateway":"10.57.0.1"}],[{"subnet":"fd57::/64","rangeStart":"fd57::10","gateway":"fd57::1"}]]`,
}

const lanRoutes = `[{"dst":"0.0.0.0/0"},{"dst":"192.168.57.0/24","gw":"10.57.0.254"}]`

// newRefLAN makes a LAN namespace whose veth end on the node, nic, stands in
// for the node's NIC.
func newRefLAN(t *testing.T, nic string) string {
	t.Helper()
	lan := nstest.NewNS(t, "lan")
	l, err := netops.Open(lan)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	host := hostHandle(t)
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: nic, PeerName: "eth0", Peer: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink(nic) })
	for _, a := range []string{"10.57.0.1/24", "fd57::1/64"} {
		if err := l.EnsureAddr("eth0", netip.MustParsePrefix(a), addrOpts()); err != nil {
			t.Fatal(err)
		}
	}
	return lan
}

// TestKindPtpExample runs the kind example (ptp + host-local + portmap,
// cniVersion 0.3.1) through libcni: two pods, the node reaches each by its
// /32 route, the pods reach each other through the node, `cnibox gc` finds
// nothing to remove while they live, and DEL twice leaves no veth, route or
// reservation.
func TestKindPtpExample(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "41-ptp.conflist"))
	a, b := e.newPod("a"), e.newPod("b")
	ra, rb := e.add(l, a), e.add(l, b)
	ipa, ipb := podIP(t, ra, true), podIP(t, rb, true)
	if err := reachable(t, a.netns, b.netns, ipb); err != nil {
		t.Errorf("pod a cannot reach pod b at %s: %v", ipb, err)
	}
	host := hostHandle(t)
	for _, ip := range []netip.Addr{ipa, ipb} {
		dev, err := host.RouteDev(ip)
		if err != nil || !strings.HasPrefix(dev, "cbx") {
			t.Errorf("the node routes %s via %q (%v), want the pod's host veth", ip, dev, err)
		}
	}
	var orphans []map[string]any
	e.cliJSON(&orphans, 0, "gc", "--dry-run", "--cache-dir", e.cacheDir)
	if len(orphans) != 0 {
		t.Errorf("cnibox gc --dry-run with two live ptp pods: %v, want nothing", orphans)
	}
	for _, p := range []*pod{a, b} {
		e.del(l, p)
		e.del(l, p)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if _, err := host.RouteDev(ipa); err == nil {
		if dev, _ := host.RouteDev(ipa); strings.HasPrefix(dev, "cbx") {
			t.Errorf("route to %s left after DEL", ipa)
		}
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
}

// TestMultusShapeMacvlan: Multus' shape through the multi role, eth0 on a
// bridge and net1 a macvlan on a node NIC (a veth to a LAN namespace): both
// interfaces work, the LAN host answers on net1, DEL (twice) removes both.
func TestMultusShapeMacvlan(t *testing.T) {
	e := newEnv(t)
	newRefLAN(t, "lan8")
	l := listFromJSON(t, `{"cniVersion":"1.1.0","name":"multus-shape","plugins":[{"type":"multi","delegates":[
		{"name":"ms-pods","cniVersion":"1.1.0","plugins":[{"type":"bridge","bridge":"ms0","isGateway":true,"isDefaultGateway":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.70.0/24"}]]}}]},
		{"name":"ms-lan","cniVersion":"1.1.0","ifname":"net1","type":"macvlan","master":"lan8",
			"ipam":{"type":"host-local","ranges":[[{"subnet":"10.57.0.0/24","rangeStart":"10.57.0.10"}]]}}]}]}`)
	p := e.newPod("multus")
	e.add(l, p)
	pod, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	if links := podLinks(t, p.netns); !slices.Contains(links, "eth0") || !slices.Contains(links, "net1") {
		t.Fatalf("pod links %v, want eth0 and net1", links)
	}
	if l, err := pod.LinkByName("net1"); err != nil || l.Kind != "macvlan" {
		t.Errorf("net1 = %+v, %v; want a macvlan", l, err)
	}
	if _, err := pod.Ping(netip.MustParseAddr("10.57.0.1"), 3*time.Second); err != nil {
		t.Errorf("the LAN host does not answer on net1: %v", err)
	}
	if _, err := pod.Ping(netip.MustParseAddr("10.88.70.1"), 3*time.Second); err != nil {
		t.Errorf("the bridge gateway does not answer on eth0: %v", err)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, p.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	e.del(l, p)
	e.del(l, p)
	if links := podLinks(t, p.netns); slices.Contains(links, "eth0") || slices.Contains(links, "net1") {
		t.Errorf("pod links after DEL: %v", links)
	}
	for _, n := range []string{"ms-pods", "ms-lan"} {
		if got := e.reservations(n); len(got) != 0 {
			t.Errorf("%s reservations left after DEL: %v", n, got)
		}
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
}
