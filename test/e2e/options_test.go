package e2e

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
)

// TestBridgeOptions: mtu, hairpinMode, promiscMode, the mac and ips
// capabilities and static IPAM show up in the kernel as configured.
func TestBridgeOptions(t *testing.T) {
	e := newEnv(t)
	l := listFromJSON(t, `{"cniVersion":"1.1.0","name":"opts","plugins":[{"type":"bridge","bridge":"cbxopts","isGateway":true,
		"mtu":1400,"hairpinMode":true,"promiscMode":true,
		"capabilities":{"mac":true,"ips":true},
		"ipam":{"type":"static","routes":[{"dst":"0.0.0.0/0","gw":"10.90.0.1"}],"dns":{"nameservers":["10.90.0.1"]}}}]}`)
	p := e.newPod("opts")
	p.rt.CapabilityArgs = map[string]any{"mac": "0a:58:0a:5a:00:07", "ips": []string{"10.90.0.7/24"}}
	r := e.add(l, p)
	if got := podIP(t, r, true); got != netip.MustParseAddr("10.90.0.7") {
		t.Errorf("address %s, want the requested 10.90.0.7", got)
	}
	if len(r.DNS.Nameservers) != 1 || r.DNS.Nameservers[0] != "10.90.0.1" {
		t.Errorf("DNS %+v, want nameserver 10.90.0.1", r.DNS)
	}
	ph, err := netops.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close()
	eth0, err := ph.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if eth0.MAC.String() != "0a:58:0a:5a:00:07" || eth0.MTU != 1400 {
		t.Errorf("pod eth0 mac %s mtu %d, want 0a:58:0a:5a:00:07 and 1400", eth0.MAC, eth0.MTU)
	}
	routes, _ := ph.Routes("eth0")
	if !slices.ContainsFunc(routes, func(r netops.Route) bool {
		return r.Dst == netip.MustParsePrefix("0.0.0.0/0") && r.GW == netip.MustParseAddr("10.90.0.1")
	}) {
		t.Errorf("pod routes %v, want default via 10.90.0.1", routes)
	}
	h := hostHandle(t)
	br, err := h.LinkByName("cbxopts")
	if err != nil || !br.Promisc {
		t.Errorf("bridge %+v (%v): want promiscuous", br, err)
	}
	veths := ourVeths(t)
	if len(veths) != 1 {
		t.Fatalf("veths %v", veths)
	}
	hv, _ := h.LinkByName(veths[0])
	if !hv.Hairpin || hv.MTU != 1400 || hv.MasterIndex != br.Index {
		t.Errorf("host veth %+v: want hairpin, mtu 1400, on the bridge", hv)
	}
	if err := e.cni.CheckNetworkList(context.Background(), l, p.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	e.del(l, p)
	e.del(l, p)
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths after DEL: %v", got)
	}
}

// TestLoopback: the loopback role brings lo up and reports its addresses.
func TestLoopback(t *testing.T) {
	e := newEnv(t)
	//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
	conf, err := libcni.ConfFromFile(repoFile("examples", "40-loopback.conf"))
	if err != nil {
		t.Fatal(err)
	}
	ns := newDownNS(t)
	rt := &libcni.RuntimeConf{ContainerID: "lo-test", NetNS: ns, IfName: "lo"}
	r, err := e.cni.AddNetwork(context.Background(), conf, rt)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	res := mustCurrent(t, r)
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "lo" || podIP(t, res, true) != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("result %+v, want lo with 127.0.0.1", res)
	}
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if lo, _ := h.LinkByName("lo"); !lo.Up {
		t.Error("lo is down after ADD")
	}
	for i := 0; i < 2; i++ {
		if err := e.cni.DelNetwork(context.Background(), conf, rt); err != nil {
			t.Fatalf("DEL %d: %v", i+1, err)
		}
	}
	if lo, _ := h.LinkByName("lo"); lo.Up {
		t.Error("lo is still up after DEL")
	}
}
