package ipvlan_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ipvlan"
)

var lanHost = netip.MustParseAddr("10.58.0.1")

// newLAN makes a LAN namespace (host 10.58.0.1, fd58::1) behind lan0, which
// stands in for the node's NIC, and skips the test when the kernel has no
// ipvlan.
func newLAN(t *testing.T) {
	t.Helper()
	host := roletest.NewLAN(t, []string{"10.58.0.1/24", "fd58::1/64"}, nil).Node
	_, err := host.EnsureIpvlan(netops.SubLinkOpts{Name: "probe0", Master: "lan0"})
	nstest.SkipIfKernelLacks(t, "ipvlan", err)
	if err != nil {
		t.Fatal(err)
	}
	host.DeleteLink("probe0")
}

func conf(v, mode, ranges string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"ipvnet","type":"ipvlan","master":"lan0","mode":%q,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.58.0/24"}]}}`, v, mode, ranges))
}

const (
	v4   = `[[{"subnet":"10.58.0.0/24","rangeStart":"10.58.0.10","gateway":"10.58.0.1"}]]`
	dual = `[[{"subnet":"10.58.0.0/24","rangeStart":"10.58.0.10","gateway":"10.58.0.1"}],[{"subnet":"fd58::/64","rangeStart":"fd58::10","gateway":"fd58::1"}]]`
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version
// and in every mode: the pod gets an ipvlan with the master's MAC, its
// addresses and routes, reaches the LAN host (l2), and nothing is left.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for _, mode := range []string{"l2", "l3", "l3s"} {
			t.Run(v+"/"+mode, func(t *testing.T) {
				n := roletest.NewNode(t, ipvlan.Role, hostlocal.Role)
				newLAN(t)
				p := n.NewPod("ipv")
				c := conf(v, mode, dual)
				out := n.Must(ipvlan.Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				pod := roletest.Open(t, p.Netns)
				l, err := pod.SubLinkByName("eth0")
				master, _ := roletest.Open(t, "").LinkByName("lan0")
				if err != nil || l.Kind != "ipvlan" || l.Mode != mode || !l.Up || l.MAC.String() != master.MAC.String() {
					t.Fatalf("pod's eth0 = %+v, %v; want an up ipvlan in mode %s with the master's MAC", l, err, mode)
				}
				addrs, _ := pod.Addrs("eth0")
				for _, ipc := range res.IPs {
					if pfx := attach.PrefixOf(ipc.Address); !slices.Contains(addrs, pfx) {
						t.Errorf("address %s not on the pod's eth0 %v", pfx, addrs)
					}
				}
				if mode == "l2" {
					if _, err := pod.Ping(lanHost, 3*time.Second); err != nil {
						t.Errorf("the pod cannot reach the LAN host: %v", err)
					}
				}
				if v >= "0.4.0" {
					n.Must(ipvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
				}
				for range 2 {
					n.Must(ipvlan.Role, "DEL", p, c)
				}
				if _, err := pod.LinkByName("eth0"); err == nil {
					t.Error("the pod's eth0 is still there after DEL")
				}
				n.Empty("ipvnet")
			})
		}
	}
}

// TestChained: without IPAM, a chained ipvlan takes its master from
// prevResult's single interface and its addresses from prevResult.
func TestChained(t *testing.T) {
	n := roletest.NewNode(t, ipvlan.Role, hostlocal.Role)
	newLAN(t)
	p := n.NewPod("chain")
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"lan0"}],"ips":[{"address":"10.58.0.77/24","gateway":"10.58.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}`
	c := []byte(`{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan","prevResult":` + prev + `}`)
	res := roletest.Result(t, n.Must(ipvlan.Role, "ADD", p, c), "1.0.0")
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.58.0.77/24" {
		t.Errorf("result IPs = %v, want prevResult's", res.IPs)
	}
	if _, err := roletest.Open(t, p.Netns).Ping(lanHost, 3*time.Second); err != nil {
		t.Errorf("the pod cannot reach the LAN host: %v", err)
	}
	for range 2 {
		n.Must(ipvlan.Role, "DEL", p, c)
	}
	bad := []byte(`{"cniVersion":"1.0.0","name":"ipvnet","type":"ipvlan","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"a"},{"name":"b"}]}}`)
	if _, err := n.Call(ipvlan.Role, "ADD", p, bad); roletest.Code(err) != 7 || !strings.Contains(err.Error(), `"master"`) {
		t.Errorf("ADD with two prevResult interfaces and no master: %v, want code 7 naming master", err)
	}
	if _, err := n.Call(ipvlan.Role, "ADD", p, conf("1.0.0", "bridge", v4)); roletest.Code(err) != 2 {
		t.Errorf("ADD in mode bridge: %v, want code 2", err)
	}
	n.Empty("ipvnet")
}
