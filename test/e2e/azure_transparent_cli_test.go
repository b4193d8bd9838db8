package e2e

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/nodestate"
)

// TestAzureTransparentCLI: the node's CLI knows transparent mode. inspect
// says the mode; doctor passes a healthy pod (proxy ARP, the node's route,
// the gateway's neighbour entry standing for the ping no one answers) and,
// with proxy ARP off or the pod's gateway entry gone, fails naming it with
// a fix; gc lists a stray azv veth and not the pods'; store rebuild finds
// the pods again as transparent azure-vnet attachments holding their
// addresses, and doctor passes on those records.
func TestAzureTransparentCLI(t *testing.T) {
	e := newEnv(t)
	transparentNode(t)
	b, err := os.ReadFile(filepath.Join("testdata", "azure-linux.conflist"))
	must(t, err)
	conf := e.confDir(map[string]string{"10-azure.conflist": string(b)})
	l := loadList(t, filepath.Join(conf, "10-azure.conflist"))
	web, db := e.newPod("web"), e.newPod("db")
	ipWeb, ipDB := podIP(t, e.add(l, web), true), podIP(t, e.add(l, db), true)
	doctor := func(want int) []doctorResult {
		t.Helper()
		var rs []doctorResult
		e.cliJSON(&rs, want, "doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--pod", "default/web")
		return rs
	}
	fails := func(want int) []doctorResult {
		t.Helper()
		var out []doctorResult
		for _, r := range doctor(want) {
			if r.Status == "fail" {
				out = append(out, r)
			}
		}
		return out
	}
	healthy := func(when string) {
		t.Helper()
		checks := map[string]bool{}
		for _, r := range doctor(0) {
			if r.Status == "fail" {
				t.Errorf("%s: doctor failed a healthy pod: %+v", when, r)
			}
			checks[r.Check] = true
		}
		for _, c := range []string{"host veth", "proxy arp", "host route", "gateway", "default route"} {
			if !checks[c] {
				t.Errorf("%s: doctor has no %q line (has %v)", when, c, checks)
			}
		}
	}

	out, _, code := e.cliRun("inspect", "endpoints", "--pod", "default/web", "--detail")
	if code != 0 || !strings.Contains(out, "transparent (no bridge") || !strings.Contains(out, "169.254.1.1") {
		t.Errorf("inspect --detail: exit %d, want the mode transparent and gateway 169.254.1.1:\n%s", code, out)
	}
	healthy("after ADD")

	hv := azvVeths(t)
	host := hostHandle(t)
	for _, name := range hv {
		key := "net.ipv4.conf." + name + ".proxy_arp"
		must(t, host.SetSysctl(key, "0"))
	}
	fs := fails(1)
	if len(fs) != 1 || fs[0].Check != "proxy arp" || !strings.Contains(fs[0].Fix, "sysctl -w net.ipv4.conf.azv") {
		t.Errorf("with proxy ARP off: failures %+v, want one proxy arp failure with its sysctl fix", fs)
	}
	for _, name := range hv {
		must(t, host.SetSysctl("net.ipv4.conf."+name+".proxy_arp", "1"))
	}
	healthy("proxy ARP back")

	ph, err := netops.Open(web.netns)
	must(t, err)
	defer ph.Close()
	must(t, ph.DeleteNeigh("eth0", netip.MustParseAddr("169.254.1.1")))
	fs = fails(1)
	if len(fs) != 1 || fs[0].Check != "gateway" || !strings.Contains(fs[0].Fix, "neigh replace 169.254.1.1 lladdr aa:aa:aa:aa:aa:aa dev eth0 nud probe") {
		t.Errorf("without the pod's gateway entry: failures %+v, want one gateway failure with the neigh fix", fs)
	}
	must(t, ph.EnsureNeighProbe("eth0", netip.MustParseAddr("169.254.1.1"), net.HardwareAddr{0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa}))
	healthy("gateway entry back")

	// gc knows azv veths: a stray one (no record, reservation or cache
	// entry) is a leftover, the pods' are not.
	stray := e.newPod("stray")
	sh, err := netops.Open(stray.netns)
	must(t, err)
	defer sh.Close()
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "azv0123456789ab", PeerName: "eth0", Peer: sh}); err != nil {
		t.Fatal(err)
	}
	var orphans []struct {
		Kind string `json:"kind"`
		Veth string `json:"veth"`
	}
	e.cliJSON(&orphans, 0, "gc", "--dry-run", "--cache-dir", e.cacheDir)
	if len(orphans) != 1 || orphans[0].Kind != "veth" || orphans[0].Veth != "azv0123456789ab" {
		t.Errorf("gc --dry-run: %+v, want only the stray veth azv0123456789ab", orphans)
	}
	must(t, host.DeleteLink("azv0123456789ab"))

	// store rebuild over the existing store: both pods, from libcni's cache.
	var rep struct {
		Attachments []nodestate.Recovered `json:"attachments"`
		Warnings    []string              `json:"warnings"`
	}
	e.cliJSON(&rep, 0, "store", "rebuild", "--data-dir", e.dataDir, "--conf-dir", conf, "--cache-dir", e.cacheDir)
	got := map[string]nodestate.Recovered{}
	for _, a := range rep.Attachments {
		got[a.ContainerID] = a
	}
	for _, p := range []struct {
		pod *pod
		ip  string
	}{{web, ipWeb.String()}, {db, ipDB.String()}} {
		a, ok := got[p.pod.id]
		if !ok || a.Plugin != "azure-vnet" || a.Extra["mode"] != "transparent" || a.Bridge != "" || !strings.HasPrefix(a.HostVeth, "azv") ||
			len(a.IPs) != 1 || a.IPs[0].Addr().String() != p.ip || len(a.Gateways) != 1 || a.Gateways[0].String() != "169.254.1.1" || a.Source != "cache" {
			t.Errorf("rebuilt %s: %+v (found %v), want azure-vnet transparent with %s via 169.254.1.1 from the cache (warnings %v)", p.pod.id, a, ok, p.ip, rep.Warnings)
		}
	}
	if rs := e.reservations(l.Name); len(rs) != 2 {
		t.Errorf("reservations after rebuild: %+v, want the two pods'", rs)
	}
	healthy("after store rebuild")
	fresh := e.newPod("fresh")
	if ip := podIP(t, e.add(l, fresh), true); ip == ipWeb || ip == ipDB {
		t.Errorf("after rebuild a new pod got %s, which a running pod holds", ip)
	}
	for _, p := range []*pod{web, db, fresh} {
		e.del(l, p)
		e.del(l, p)
	}
	if left := azvVeths(t); len(left) != 0 || len(e.reservations(l.Name)) != 0 {
		t.Errorf("left after DEL: veths %v, reservations %v", left, e.reservations(l.Name))
	}
}
