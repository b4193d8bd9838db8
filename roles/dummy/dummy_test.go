package dummy_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/dummy"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

var gw4 = netip.MustParseAddr("10.59.0.1")

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, dummy.Role, hostlocal.Role) }

var open = roletest.Open

// requireDummy skips the test on a kernel without dummy devices.
func requireDummy(t *testing.T) {
	t.Helper()
	h := open(t, nstest.NewNS(t, "probe"))
	_, err := h.EnsureDummy("probe0")
	nstest.SkipIfKernelLacks(t, "dummy devices (dummy)", err)
	if err != nil {
		t.Fatal(err)
	}
}

// conf is a dummy network; ranges is host-local's "ranges" JSON.
func conf(v, ranges string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"dmnet","type":"dummy",
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"192.168.59.0/24"}]}}`, v, ranges))
}

const (
	v4   = `[[{"subnet":"10.59.0.0/24","rangeStart":"10.59.0.10","gateway":"10.59.0.1"}]]`
	dual = `[[{"subnet":"10.59.0.0/24","rangeStart":"10.59.0.10","gateway":"10.59.0.1"}],[{"subnet":"fd59::/64","rangeStart":"fd59::10","gateway":"fd59::1"}]]`
)

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack: the pod gets an up dummy with the kernel's MTU,
// IPAM's addresses (which answer) and routes, and nothing is left after
// DEL.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				requireDummy(t)
				n := newNode(t)
				p := n.NewPod("dm")
				c := conf(v, ranges)
				out := n.Must(dummy.Role, "ADD", p, c)
				res := roletest.Result(t, out, v)
				roletest.PodEth0(t, res, p)
				pod := open(t, p.Netns)
				l, err := pod.LinkByName("eth0")
				if err != nil || l.Kind != "dummy" || !l.Up || l.MTU != 1500 || l.MAC.String() != res.Interfaces[0].Mac {
					t.Fatalf("pod's eth0 = %+v, %v; want an up dummy, mtu 1500, MAC %s", l, err, res.Interfaces[0].Mac)
				}
				roletest.AddrsOnEth0(t, pod, res)
				for _, ipc := range res.IPs {
					pfx := attach.PrefixOf(ipc.Address)
					if _, err := pod.Ping(pfx.Addr(), 3*time.Second); err != nil {
						t.Errorf("the pod's own address %s does not answer: %v", pfx.Addr(), err)
					}
				}
				if want := map[string]int{"v4": 1, "dual": 2}[name]; len(res.IPs) != want {
					t.Errorf("result IPs = %v, want %d", res.IPs, want)
				}
				roletest.RouteOnEth0(t, pod, "192.168.59.0/24", gw4)
				if eps := n.Endpoints("dmnet"); len(eps) != 1 || eps[0].Plugin != "dummy" || len(eps[0].IPs) != len(res.IPs) {
					t.Errorf("endpoint records = %+v", eps)
				}
				n.CheckDelTwice(dummy.Role, p, c, out, v, "dmnet")
			})
		}
	}
}

// TestUndo: an ADD that fails after the device (an IPAM route whose gateway
// no route reaches) leaves no device, record or reservation. On a kernel
// without dummy devices it fails one step earlier and leaves nothing either.
func TestUndo(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"dmnet","type":"dummy",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.59.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	err := n.FailedAdd(dummy.Role, p, c, "dmnet")
	nstest.SkipIfKernelLacks(t, "dummy devices (dummy)", err)
	if !strings.Contains(err.Error(), "192.168.0.0/16") || roletest.Code(err) != 5 {
		t.Errorf("ADD with an unreachable route gateway: %v, want code 5 naming the route", err)
	}
}

// TestDelNetnsGone: DEL works (twice) once the pod's namespace is gone.
func TestDelNetnsGone(t *testing.T) {
	requireDummy(t)
	n := newNode(t)
	p := n.NewPod("gone")
	c := conf("1.0.0", dual)
	n.Must(dummy.Role, "ADD", p, c)
	n.DelNetnsGone(dummy.Role, p, c, "dmnet")
}

// TestGC: GC keeps the valid attachments and removes the others' device,
// record and address; STATUS is ready.
func TestGC(t *testing.T) {
	requireDummy(t)
	n := newNode(t)
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	c := conf("1.1.0", v4)
	n.Must(dummy.Role, "ADD", keep, c)
	n.Must(dummy.Role, "ADD", drop, c)
	n.GCKeeps(dummy.Role, keep, drop, c, "dmnet")
}

// TestCheckFails: CHECK notices a missing address and a device that is
// down.
func TestCheckFails(t *testing.T) {
	requireDummy(t)
	n := newNode(t)
	p := n.NewPod("chk")
	c := conf("1.0.0", v4)
	out := n.Must(dummy.Role, "ADD", p, c)
	pod := open(t, p.Netns)
	res := roletest.Result(t, out, "1.0.0")
	if err := pod.DeleteAddr("eth0", attach.PrefixOf(res.IPs[0].Address)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(dummy.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("CHECK without the address: %v, want an error saying it is missing", err)
	}
	if err := pod.SetLinkDown("eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(dummy.Role, "CHECK", p, roletest.WithPrev(t, c, out)); err == nil || !strings.Contains(err.Error(), "down") {
		t.Errorf("CHECK of a device that is down: %v, want an error saying so", err)
	}
	n.Must(dummy.Role, "DEL", p, c)
	n.Empty("dmnet")
}
