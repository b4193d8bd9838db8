package multi

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestDelegateStatuses: the entries Multus' CreateNetworkStatuses makes of
// a result: mtu and mac of the pod's interfaces, the default routes'
// gateways, dns, device-info, addresses by interface, and on the primary
// the interface with the first gateway as default.
func TestDelegateStatuses(t *testing.T) {
	idx := func(i int) *int { return &i }
	_, sub, _ := net.ParseCIDR("10.9.0.5/24")
	sub.IP = net.ParseIP("10.9.0.5")
	_, sub2, _ := net.ParseCIDR("10.9.1.5/24")
	sub2.IP = net.ParseIP("10.9.1.5")
	res := &current.Result{CNIVersion: "1.1.0",
		Interfaces: []*current.Interface{{Name: "br0"}, {Name: "eth0", Mac: "02:00:00:00:00:01", Mtu: 1450, Sandbox: "/ns"}, {Name: "eth1", Mac: "02:00:00:00:00:02", Mtu: 9000, Sandbox: "/ns"}},
		IPs:        []*current.IPConfig{{Interface: idx(2), Address: *sub2, Gateway: net.ParseIP("10.9.1.1")}, {Interface: idx(1), Address: *sub}},
		Routes:     []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, GW: net.ParseIP("10.9.1.1")}},
		DNS:        types.DNS{Nameservers: []string{"10.9.0.10"}},
	}
	d := &multiDelegate{Status: "ns/x", IfName: "eth0"}
	got, err := delegateStatuses(d, res, true, json.RawMessage(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:05.0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"name":"ns/x","interface":"eth0","ips":["10.9.0.5"],"mac":"02:00:00:00:00:01","mtu":1450,"dns":{"nameservers":["10.9.0.10"]},"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:05.0"}},"gateway":["10.9.1.1"]},` +
		`{"name":"ns/x","interface":"eth1","ips":["10.9.1.5"],"mac":"02:00:00:00:00:02","mtu":9000,"default":true,"dns":{"nameservers":["10.9.0.10"]},"device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:05.0"}},"gateway":["10.9.1.1"]}]`
	if string(b) != want {
		t.Errorf("statuses\n %s\nwant\n %s", b, want)
	}
}
