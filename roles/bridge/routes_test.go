package bridge_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/store"
)

// TestResultRoutes: an IPAM route without a gateway goes via the address's
// gateway in the pod, but the ADD result lists it as IPAM gave it, without
// one, as the reference bridge does; a route with a gateway and the default
// route isDefaultGateway adds name theirs. The endpoint record names the
// gateway the pod's route goes via. CHECK passes with that result.
func TestResultRoutes(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brroutes") })
	for _, v := range roletest.Versions {
		t.Run(v, func(t *testing.T) {
			c := []byte(`{"cniVersion":"` + v + `","name":"routes","type":"bridge","bridge":"brroutes","isDefaultGateway":true,
				"ipam":{"type":"host-local","ranges":[[{"subnet":"10.11.9.0/24","gateway":"10.11.9.1"}]],
				"routes":[{"dst":"10.77.0.0/16"},{"dst":"192.168.77.0/24","gw":"10.11.9.254"}]}}`)
			p := n.NewPod("routes")
			out := n.Must(bridge.Role, "ADD", p, c)
			res := roletest.Result(t, out, v)
			got := map[string]string{}
			for _, r := range res.Routes {
				got[attach.PrefixOf(r.Dst).String()] = attach.AddrOf(r.GW).String()
			}
			want := map[string]string{"10.77.0.0/16": "invalid IP", "192.168.77.0/24": "10.11.9.254", "0.0.0.0/0": "10.11.9.1"}
			if len(got) != len(want) {
				t.Errorf("result routes = %v, want %v", got, want)
			}
			for dst, gw := range want {
				if got[dst] != gw {
					t.Errorf("result route %s has gateway %q, want %q (all: %v)", dst, got[dst], gw, got)
				}
			}
			pod, err := netops.Open(p.Netns)
			if err != nil {
				t.Fatal(err)
			}
			defer pod.Close()
			routes, err := pod.Routes("eth0")
			if err != nil {
				t.Fatal(err)
			}
			gw := netip.MustParseAddr("10.11.9.1")
			if !slices.ContainsFunc(routes, func(r netops.Route) bool { return r.Dst.String() == "10.77.0.0/16" && r.GW == gw }) {
				t.Errorf("the pod has no route 10.77.0.0/16 via %s: %v", gw, routes)
			}
			// The record says what the pod has: the route via the gateway.
			eps := n.Endpoints("routes")
			if len(eps) != 1 || !slices.ContainsFunc(eps[0].Routes, func(r store.Route) bool { return r.Dst.String() == "10.77.0.0/16" && r.GW == gw }) {
				t.Errorf("endpoint records = %+v, want route 10.77.0.0/16 via %s", eps, gw)
			}
			if v >= "0.4.0" {
				n.Must(bridge.Role, "CHECK", p, roletest.WithPrev(t, c, out))
			}
			n.Must(bridge.Role, "DEL", p, c)
		})
	}
}
