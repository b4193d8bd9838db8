package multi_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/multi"
)

// TestMultusResourceName: two networks whose NADs name the same
// resourceName get the pod's devices of that resource one each, in the
// agent's (sorted) order, as runtimeConfig.deviceID (the NADs declare
// the capability; pciBusID is PCI only): host-device moves each veth the
// device plugin handed out by name into the pod, network-status carries
// their MACs, DEL gives them back; a third network of the resource with
// two devices is error 7 and leaves nothing behind.
func TestMultusResourceName(t *testing.T) {
	conf, g := selectionSetup(t, "")
	const res = "cnibox.example/veth"
	for i, name := range []string{"vethnet", "vethnet2", "vethnet3"} {
		g.nad("default", name, `{"cniVersion":"1.0.0","name":"`+name+`","type":"host-device","capabilities":{"deviceID":true},"ipam":{"type":"static","addresses":[{"address":"10.77.4`+string(rune('0'+i))+`.5/24"}]}}`, res)
	}
	host, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	lan, err := netops.Open(nstest.NewNS(t, "lan"))
	if err != nil {
		t.Fatal(err)
	}
	defer lan.Close()
	macs := map[string]string{}
	for i, dev := range []string{"rnveth0", "rnveth1"} {
		if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: dev, PeerName: "lan" + string(rune('0'+i)), Peer: lan}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { host.DeleteLink(dev) })
		st, err := host.DeviceStateOf(dev)
		if err != nil {
			t.Fatal(err)
		}
		macs[dev] = st.MAC.String()
	}
	n := fullNode(t)

	p := n.NewPod("rn")
	g.pod("default", p.ID, map[string]string{networks: "vethnet,vethnet2"})
	g.mu.Lock()
	g.devices["default/"+p.ID] = map[string][]string{res: {"rnveth0", "rnveth1"}, "other.example/x": {"0000:00:05.0"}}
	g.mu.Unlock()
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID
	n.Add(multi.MultusRole, p, conf)

	links := map[string]netops.Link{}
	for _, l := range roletest.InNS(t, p.Netns, (*netops.Handle).Links) {
		links[l.Name] = l
	}
	st := g.networkStatus(t, "default", p.ID)
	for ifname, dev := range map[string]string{"net1": "rnveth0", "net2": "rnveth1"} {
		if got := links[ifname].MAC.String(); got != macs[dev] {
			t.Errorf("the pod's %s has MAC %q, want %s (%s, the resource's device in order)", ifname, got, macs[dev], dev)
		}
		if _, err := host.LinkByName(dev); err == nil {
			t.Errorf("the node still has %s", dev)
		}
		if e := statusOf(t, st, ifname); e["mac"] != macs[dev] {
			t.Errorf("network-status of %s: mac %v, want %s", ifname, e["mac"], macs[dev])
		}
	}
	if a := podAddr(t, p.Netns, "net2"); a != netip.MustParseAddr("10.77.41.5") {
		t.Errorf("net2 has %s, want vethnet2's 10.77.41.5", a)
	}
	n.Call(multi.MultusRole, "DEL", p, conf)
	for dev, mac := range macs {
		if st, err := host.DeviceStateOf(dev); err != nil || st.MAC.String() != mac {
			t.Errorf("after DEL, %s on the node: %+v %v", dev, st, err)
		}
	}

	q := n.NewPod("rn3")
	g.pod("default", q.ID, map[string]string{networks: "vethnet,vethnet2,vethnet3"})
	g.mu.Lock()
	g.devices["default/"+q.ID] = map[string][]string{res: {"rnveth0", "rnveth1"}}
	g.mu.Unlock()
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + q.ID
	_, _, err = n.Call(multi.MultusRole, "ADD", q, conf)
	if roletest.Code(err) != 7 || !strings.Contains(err.Error(), res) || !strings.Contains(err.Error(), "request one more") {
		t.Errorf("a third network of %s with two devices: %v, want code 7 asking for one more", res, err)
	}
	for dev := range macs {
		if _, err := host.LinkByName(dev); err != nil {
			t.Errorf("after the failed ADD, %s is not on the node: %v", dev, err)
		}
	}
}
