package ptp_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

func newNode(t *testing.T) *roletest.Node { return roletest.NewNode(t, ptp.Role, hostlocal.Role) }

// conf is a ptp network; ranges is host-local's "ranges" JSON.
func conf(v, ranges, extra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":%q,"name":"ptpnet","type":"ptp"%s,
		"ipam":{"type":"host-local","ranges":%s,"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}`, v, extra, ranges))
}

const v4 = `[[{"subnet":"10.77.0.0/24"}]]`
const dual = `[[{"subnet":"10.77.0.0/24"}],[{"subnet":"fd77::/64"}]]`

// route is what a test compares of a route: destination, gateway, source.
type route struct {
	dst     netip.Prefix
	gw, src netip.Addr
}

func hasRoute(rs []netops.Route, want route) bool {
	return slices.ContainsFunc(rs, func(r netops.Route) bool { return r.Dst == want.dst && r.GW == want.gw && r.Src == want.src })
}

// TestAddCheckDel runs ADD, CHECK, DEL and DEL again at every spec version,
// single and dual stack, and looks at what a user would: the pod's
// addresses and routes, the host end's gateways, the node's routes to the
// pod, a ping from the node, and nothing left after DEL.
func TestAddCheckDel(t *testing.T) {
	for _, v := range roletest.Versions {
		for name, ranges := range map[string]string{"v4": v4, "dual": dual} {
			t.Run(v+"/"+name, func(t *testing.T) {
				n := newNode(t)
				p := n.NewPod("ptp")
				c := conf(v, ranges, "")
				res := roletest.Result(t, n.Must(ptp.Role, "ADD", p, c), v)
				hostName := attach.HostVethName(p.ID, "eth0")
				if len(res.Interfaces) != 2 || res.Interfaces[0].Name != hostName || res.Interfaces[1].Name != "eth0" || res.Interfaces[1].Sandbox != p.Netns {
					t.Fatalf("interfaces = %+v", res.Interfaces)
				}
				pod, host := roletest.Open(t, p.Netns), roletest.Open(t, "")
				podRoutes, err := pod.Routes("eth0")
				if err != nil {
					t.Fatal(err)
				}
				hostRoutes, err := host.Routes(hostName)
				if err != nil {
					t.Fatal(err)
				}
				hostAddrs, _ := host.Addrs(hostName)
				for _, ipc := range res.IPs {
					pfx := attach.PrefixOf(ipc.Address)
					gw := attach.AddrOf(ipc.Gateway)
					bits := pfx.Addr().BitLen()
					if ipc.Interface == nil || *ipc.Interface != 1 {
						t.Errorf("address %s: interface %v, want 1", pfx, ipc.Interface)
					}
					if want := pfx.Masked().Addr().Next(); gw != want {
						t.Errorf("gateway of %s = %s, want %s", pfx, gw, want)
					}
					def := netip.MustParsePrefix("0.0.0.0/0")
					if pfx.Addr().Is6() {
						def = netip.MustParsePrefix("::/0")
					}
					for _, want := range []route{
						{dst: netip.PrefixFrom(gw, bits), src: pfx.Addr()},
						{dst: pfx.Masked(), gw: gw, src: pfx.Addr()},
						{dst: def, gw: gw},
					} {
						if !hasRoute(podRoutes, want) {
							t.Errorf("pod route %+v missing in %v", want, podRoutes)
						}
					}
					if !slices.Contains(hostAddrs, netip.PrefixFrom(gw, bits)) {
						t.Errorf("host end has %v, want %s/%d", hostAddrs, gw, bits)
					}
					if !slices.ContainsFunc(hostRoutes, func(r netops.Route) bool { return r.Dst == netip.PrefixFrom(pfx.Addr(), bits) }) {
						t.Errorf("node route to %s missing in %v", pfx.Addr(), hostRoutes)
					}
					if _, err := host.Ping(pfx.Addr(), 3*time.Second); err != nil {
						t.Errorf("node cannot ping the pod at %s: %v", pfx.Addr(), err)
					}
					if _, err := pod.Ping(gw, 3*time.Second); err != nil {
						t.Errorf("pod cannot ping its gateway %s: %v", gw, err)
					}
				}
				if eps := n.Endpoints("ptpnet"); len(eps) != 1 || eps[0].HostVeth != hostName || eps[0].Plugin != "ptp" {
					t.Errorf("endpoint records = %+v", eps)
				}
				if v >= "0.4.0" {
					n.Must(ptp.Role, "CHECK", p, roletest.WithPrev(t, c, n.Must(ptp.Role, "ADD", p, c)))
				}
				for range 2 {
					n.Must(ptp.Role, "DEL", p, c)
				}
				if _, err := host.LinkByName(hostName); err == nil {
					t.Errorf("host veth %s still there after DEL", hostName)
				}
				n.Empty("ptpnet")
			})
		}
	}
}
