package nodestate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/store"
)

// The networks of the rebuild test, as libcni hands them to the plugin
// (the conflist's first plugin with its name and version).
const (
	ptpList = `{"cniVersion":"1.1.0","name":"ptpnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.63.1.0/24"}]]}}]}`
	ptpConf = `{"cniVersion":"1.1.0","name":"ptpnet","type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.63.1.0/24"}]]}}`
	mvList  = `{"cniVersion":"1.1.0","name":"mvnet","plugins":[{"type":"macvlan","master":"lan0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.63.2.0/24"}]]}}]}`
	mvConf  = `{"cniVersion":"1.1.0","name":"mvnet","type":"macvlan","master":"lan0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.63.2.0/24"}]]}}`
)

// rebuildNode runs roles in process against a store in dir.
type rebuildNode struct {
	t   *testing.T
	dir string
	reg *cniplug.Registry
}

func (n *rebuildNode) call(typ, cmd, cid, netns string, conf string) *current.Result {
	n.t.Helper()
	role, _ := n.reg.Lookup(typ)
	e := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + cid, store.EnvDataDir: n.dir}
	var stderr bytes.Buffer
	out, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv: func(k string) string { return e[k] }, Stdin: bytes.NewReader([]byte(conf)), Stderr: &stderr, Registry: n.reg})
	if err != nil {
		n.t.Fatalf("%s %s %s: %v (stderr: %s)", typ, cmd, cid, err, stderr.String())
	}
	if cmd != "ADD" {
		return nil
	}
	res, err := current.NewResultFromResult(mustResult(n.t, out))
	if err != nil {
		n.t.Fatal(err)
	}
	return res
}

func mustResult(t *testing.T, out []byte) *current.Result {
	t.Helper()
	var r current.Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("result %s: %v", out, err)
	}
	return &r
}

// cache writes libcni's cache entry of an attachment (the format of
// libcni's cachedInfo, kind cniCacheV1) into cacheDir.
func cache(t *testing.T, cacheDir, network, list, cid, netns string) {
	t.Helper()
	entry := map[string]any{"kind": "cniCacheV1", "containerId": cid, "config": []byte(list), "ifName": "eth0",
		"networkName": network, "netns": netns, "cniArgs": [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", cid}}}
	b, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cacheDir, "results")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-eth0", network, cid)), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func firstAddr(t *testing.T, res *current.Result) netip.Prefix {
	t.Helper()
	if len(res.IPs) == 0 {
		t.Fatalf("no address in %+v", res)
	}
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	bits, _ := res.IPs[0].Address.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}

// TestRebuildInterfaceRoles deletes the store under running ptp and
// macvlan pods and rebuilds it from the kernel, the namespaces, libcni's
// cache and the configs: a ptp pod with a cache entry and one without (its
// host veth on no bridge, the node's /32 route to it) and a cached macvlan
// pod get their endpoint records (role, host veth, gateway, master) and
// reservations back; a new pod gets a free address; DEL of each releases
// its address.
func TestRebuildInterfaceRoles(t *testing.T) {
	nstest.RequireRoot(t)
	n := &rebuildNode{t: t, dir: t.TempDir(), reg: roles.Registry()}
	confDir, cacheDir := t.TempDir(), t.TempDir()
	for name, list := range map[string]string{"10-ptp.conflist": ptpList, "20-mv.conflist": mvList} {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	host, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "lan0", PeerName: "lan0peer", Peer: host}); err != nil {
		t.Fatal(err)
	}
	defer host.DeleteLink("lan0")
	if err := host.SetLinkUp("lan0"); err != nil {
		t.Fatal(err)
	}

	type pod struct {
		typ, network, conf, cid, netns string
		addr                           netip.Prefix
	}
	var pods []*pod
	for _, p := range []*pod{
		{typ: "ptp", network: "ptpnet", conf: ptpConf, cid: "ptp-cached"},
		{typ: "ptp", network: "ptpnet", conf: ptpConf, cid: "ptp-uncached"},
		{typ: "macvlan", network: "mvnet", conf: mvConf, cid: "mv-cached"},
	} {
		p.netns = nstest.NewNS(t, "rbpod")
		p.addr = firstAddr(t, n.call(p.typ, "ADD", p.cid, p.netns, p.conf))
		if p.cid != "ptp-uncached" {
			list := ptpList
			if p.typ == "macvlan" {
				list = mvList
			}
			cache(t, cacheDir, p.network, list, p.cid, p.netns)
		}
		pods = append(pods, p)
	}

	if err := os.Remove(filepath.Join(n.dir, store.FileName)); err != nil {
		t.Fatal(err)
	}
	found, warnings, err := nodestate.Discover(n.reg, confDir, cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found %+v, warnings %q", found, warnings)
	var warn bytes.Buffer
	if _, err := store.Rebuild(n.dir, store.Options{}, func(st *store.Store) error {
		return nodestate.Record(st, found, confDir, &warn)
	}); err != nil {
		t.Fatal(err)
	}
	if warn.Len() > 0 {
		t.Errorf("Record warned: %s", warn.String())
	}

	st, err := store.Open(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := st.Endpoints("")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{} // address -> container ID
	for _, nw := range []string{"ptpnet", "mvnet"} {
		if err := st.ViewIPAM(nw, func(tx *store.IPAMTx) error {
			for _, r := range tx.All() {
				held[r.Addr.String()] = r.ContainerID
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	uncachedVeth := n.reg.KnownOf("bridge").HostVeth.Name("ptp-uncached", "eth0")
	for _, p := range pods {
		cid := p.cid
		if cid == "ptp-uncached" {
			cid = "rebuilt-" + uncachedVeth
		}
		i := slices.IndexFunc(eps, func(e store.Endpoint) bool { return e.ContainerID == cid })
		if i < 0 {
			t.Errorf("no endpoint record of %s (%s) after rebuild: %+v", p.cid, cid, eps)
			continue
		}
		ep := eps[i]
		if ep.Plugin != p.typ || ep.Network != p.network || ep.IfName != "eth0" || !slices.Contains(ep.IPs, p.addr) || ep.Extra["rebuilt"] == "" {
			t.Errorf("record of %s = %+v, want a %s record of %s with %s", p.cid, ep, p.typ, p.network, p.addr)
		}
		switch p.typ {
		case "ptp":
			gw := netip.MustParseAddr("10.63.1.1")
			if ep.HostVeth != n.reg.KnownOf("bridge").HostVeth.Name(p.cid, "eth0") || ep.Bridge != "" || !slices.Contains(ep.Gateways, gw) {
				t.Errorf("ptp record of %s: host veth %q, bridge %q, gateways %v; want %s, no bridge, %s", p.cid, ep.HostVeth, ep.Bridge, ep.Gateways, n.reg.KnownOf("bridge").HostVeth.Name(p.cid, "eth0"), gw)
			}
		case "macvlan":
			if ep.Extra["master"] != "lan0" || ep.HostVeth != "" || ep.Netns != p.netns {
				t.Errorf("macvlan record of %s = %+v, want master lan0 and netns %s", p.cid, ep, p.netns)
			}
		}
		if held[p.addr.Addr().String()] != cid {
			t.Errorf("after rebuild %s is held by %q, want %s", p.addr.Addr(), held[p.addr.Addr().String()], cid)
		}
	}

	// A new pod gets an address no running pod has; DEL releases each.
	fresh := &pod{typ: "ptp", network: "ptpnet", conf: ptpConf, cid: "ptp-fresh", netns: nstest.NewNS(t, "rbpod")}
	fresh.addr = firstAddr(t, n.call("ptp", "ADD", fresh.cid, fresh.netns, ptpConf))
	for _, p := range pods {
		if p.addr.Addr() == fresh.addr.Addr() {
			t.Fatalf("the new pod got %s, which %s still uses", fresh.addr, p.cid)
		}
	}
	for _, p := range append(pods, fresh) {
		n.call(p.typ, "DEL", p.cid, p.netns, p.conf)
	}
	st, err = store.Open(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	left, _ := st.Endpoints("")
	// The uncached pod's record is under its placeholder ID: the runtime's
	// GC removes it (as for a bridge pod without a cache entry).
	if len(left) != 1 || left[0].ContainerID != "rebuilt-"+uncachedVeth {
		t.Errorf("records after DEL = %+v, want only the uncached pod's placeholder", left)
	}
}
