package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// The flannel and multi meta roles driven through libcni.

func seedFile(name string) string {
	return filepath.Join("testdata", name)
}

// TestFlannelSeedConflist runs flannel's seed conflist (flannel, then
// portmap) unchanged with the seed subnet.env.
func TestFlannelSeedConflist(t *testing.T) {
	flannelScenario(t, loadList(t, seedFile("10-flannel.conflist")))
}

// TestFlannelSeedPluginOnly runs the seed's flannel plugin alone.
func TestFlannelSeedPluginOnly(t *testing.T) {
	seed := loadList(t, seedFile("10-flannel.conflist"))
	var m map[string]any
	if err := json.Unmarshal(seed.Bytes, &m); err != nil {
		t.Fatal(err)
	}
	m["plugins"] = m["plugins"].([]any)[:1]
	b, _ := json.Marshal(m)
	flannelScenario(t, listFromJSON(t, string(b)))
}

// TestFlannelExampleIsSeed: the flannel example is the seed, unchanged.
func TestFlannelExampleIsSeed(t *testing.T) {
	ex, seed := loadList(t, repoFile("examples", "50-flannel.conflist")), loadList(t, seedFile("10-flannel.conflist"))
	if string(ex.Bytes) != string(seed.Bytes) {
		t.Errorf("examples/50-flannel.conflist differs from the seed %s", seedFile("10-flannel.conflist"))
	}
}

// flannelScenario: two pods on the node subnet of the seed subnet.env reach
// each other; DEL frees the addresses, also when the delegate record was
// lost; DEL twice.
func flannelScenario(t *testing.T, l *libcni.NetworkConfigList) {
	e := newEnv(t)
	t.Setenv("CNIBOX_FLANNEL_SUBNET_FILE", seedFile("subnet.env"))
	a, b := e.newPod("a"), e.newPod("b")
	ra, rb := e.add(l, a), e.add(l, b)
	ipa, ipb := podIP(t, ra, true), podIP(t, rb, true)
	subnet := netip.MustParsePrefix("10.244.0.0/24")
	if ipa == ipb || !subnet.Contains(ipa) || !subnet.Contains(ipb) {
		t.Fatalf("pod addresses %s, %s: want two distinct addresses of FLANNEL_SUBNET %s", ipa, ipb, subnet)
	}
	if err := reachable(t, a.netns, b.netns, ipb); err != nil {
		t.Errorf("pod a cannot reach pod b at %s: %v", ipb, err)
	}
	if err := reachable(t, b.netns, a.netns, ipa); err != nil {
		t.Errorf("pod b cannot reach pod a at %s: %v", ipa, err)
	}
	h, err := netops.Open(a.netns)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := h.LinkByName("eth0"); err != nil || l.MTU != 1450 {
		t.Errorf("pod eth0 = %+v, %v: want MTU 1450 from FLANNEL_MTU", l, err)
	}
	h.Close()

	e.del(l, a)
	e.del(l, a)
	if got := e.reservations(l.Name); len(got) != 1 || got[0].Addr != ipb {
		t.Errorf("reservations after DEL of a: %v, want only b's %s", got, ipb)
	}

	// Lose b's delegate record: DEL rebuilds the delegate from subnet.env.
	st, err := store.Open(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := delegaterec.Records.In(st).Get(l.Name, b.id, "eth0"); !found {
		t.Errorf("no delegate record of b in the store")
	}
	if err := delegaterec.Records.In(st).Delete(l.Name, b.id, "eth0"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	e.del(l, b)
	e.del(l, b)
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL without the record: %v", got)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after DEL: %v", got)
	}
	if got := cacheFiles(t, e.cacheDir); len(got) != 0 {
		t.Errorf("libcni cache files left after DEL: %v", got)
	}
}

// multiNetworks returns the example's delegate networks as conflists of
// their own, for pods attached to just one of them.
func multiNetworks(t *testing.T, l *libcni.NetworkConfigList) []*libcni.NetworkConfigList {
	t.Helper()
	var m struct {
		Plugins []struct {
			Delegates []map[string]any `json:"delegates"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(l.Bytes, &m); err != nil {
		t.Fatal(err)
	}
	var out []*libcni.NetworkConfigList
	for _, d := range m.Plugins[0].Delegates {
		delete(d, "ifname")
		if _, ok := d["plugins"]; !ok {
			d = map[string]any{"name": d["name"], "cniVersion": d["cniVersion"], "plugins": []any{d}}
		}
		b, _ := json.Marshal(d)
		out = append(out, listFromJSON(t, string(b)))
	}
	return out
}

// TestMultiExample: a pod of the multi example has eth0 on "pods" and net1
// on "storage", each reachable from a pod of that network alone; CHECK and
// STATUS pass; DEL twice removes everything.
func TestMultiExample(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "60-multi.conflist"))
	nets := multiNetworks(t, l)
	m, peer0, peer1 := e.newPod("m"), e.newPod("peer0"), e.newPod("peer1")
	e.add(nets[0], peer0)
	rp1 := e.add(nets[1], peer1)
	res := e.add(l, m)
	if got := podLinks(t, m.netns); !slices.Contains(got, "eth0") || !slices.Contains(got, "net1") {
		t.Fatalf("multi pod links %v, want eth0 and net1", got)
	}
	ip0 := podIP(t, res, true)
	if !netip.MustParsePrefix("10.88.60.0/24").Contains(ip0) {
		t.Errorf("result address %s, want the primary network's (10.88.60.0/24)", ip0)
	}
	ip1 := addrOn(t, m.netns, "net1")
	if !netip.MustParsePrefix("10.88.61.0/24").Contains(ip1) {
		t.Errorf("net1 address %s, want one of storage (10.88.61.0/24)", ip1)
	}
	if err := reachable(t, peer0.netns, m.netns, ip0); err != nil {
		t.Errorf("a pods pod cannot reach the multi pod's eth0 %s: %v", ip0, err)
	}
	if err := reachable(t, peer1.netns, m.netns, ip1); err != nil {
		t.Errorf("a storage pod cannot reach the multi pod's net1 %s: %v", ip1, err)
	}
	if err := reachable(t, m.netns, peer1.netns, podIP(t, rp1, true)); err != nil {
		t.Errorf("the multi pod cannot reach the storage pod: %v", err)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, m.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := e.cni.GetStatusNetworkList(context.Background(), l); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	e.del(l, m)
	e.del(l, m)
	if got := podLinks(t, m.netns); slices.Contains(got, "eth0") || slices.Contains(got, "net1") {
		t.Errorf("multi pod links after DEL: %v", got)
	}
	for _, n := range nets {
		for _, r := range e.reservations(n.Name) {
			if r.ContainerID == m.id {
				t.Errorf("%s reservation of the multi pod left after DEL: %v", n.Name, r)
			}
		}
	}
	e.del(nets[0], peer0)
	e.del(nets[1], peer1)
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
	if got := cacheFiles(t, e.cacheDir); len(got) != 0 {
		t.Errorf("libcni cache files left: %v", got)
	}
}

// TestMultiRollback: when the second network fails, the first is removed:
// no veth, no reservation left; the error names the failing delegate.
func TestMultiRollback(t *testing.T) {
	e := newEnv(t)
	l := listFromJSON(t, `{"cniVersion":"1.1.0","name":"multi-rb","plugins":[{"type":"multi","delegates":[
		{"name":"rb-a","cniVersion":"1.1.0","plugins":[{"type":"bridge","bridge":"rb0","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.62.0/24"}]]}}]},
		{"name":"rb-b","cniVersion":"1.1.0","type":"bridge","bridge":"rb1","ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.63.0/24","gateway":"10.88.64.1"}]]}}]}]}`)
	m := e.newPod("m")
	_, err := e.cni.AddNetworkList(context.Background(), l, m.rt)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 7 || !strings.Contains(te.Msg, `delegates[1] "rb-b"`) {
		t.Fatalf("ADD = %v, want CNI error 7 naming delegates[1] \"rb-b\"", err)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left after the failed ADD: %v", got)
	}
	for _, n := range []string{"rb-a", "rb-b"} {
		if got := e.reservations(n); len(got) != 0 {
			t.Errorf("%s reservations left after the failed ADD: %v", n, got)
		}
	}
	e.del(l, m)
	e.del(l, m)
}

// TestMultiGC: libcni's GC with one pod listed removes the other multi pod's
// interfaces and addresses on both networks, also without libcni's cache.
func TestMultiGC(t *testing.T) {
	e := newEnv(t)
	l := loadList(t, repoFile("examples", "60-multi.conflist"))
	keep, drop := e.newPod("keep"), e.newPod("drop")
	e.add(l, keep)
	e.add(l, drop)
	if got := ourVeths(t); len(got) != 4 {
		t.Fatalf("veths after two ADDs: %v, want 4", got)
	}
	err := e.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: keep.id, IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := ourVeths(t); len(got) != 2 {
		t.Errorf("veths after GC: %v, want the kept pod's 2", got)
	}
	for _, n := range multiNetworks(t, l) {
		res := e.reservations(n.Name)
		if len(res) != 1 || res[0].ContainerID != keep.id {
			t.Errorf("%s reservations after GC: %v, want the kept pod's only", n.Name, res)
		}
	}
	// Without libcni's cache, the plugin's own record drives the GC.
	third := e.newPod("third")
	e.add(l, third)
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir}, t.TempDir(), nil)
	err = e.cni.GCNetworkList(context.Background(), l, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: keep.id, IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC without libcni's cache: %v", err)
	}
	if got := ourVeths(t); len(got) != 2 {
		t.Errorf("veths after GC without libcni's cache: %v, want the kept pod's 2", got)
	}
	e.del(l, keep)
	e.del(l, keep)
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
}

// addrOn returns the IPv4 address of ifname in a namespace.
func addrOn(t *testing.T, ns, ifname string) netip.Addr {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ps, err := h.Addrs(ifname)
	if err != nil {
		t.Fatalf("addresses of %s: %v", ifname, err)
	}
	for _, p := range ps {
		if p.Addr().Is4() {
			return p.Addr()
		}
	}
	t.Fatalf("%s has no IPv4 address", ifname)
	return netip.Addr{}
}
