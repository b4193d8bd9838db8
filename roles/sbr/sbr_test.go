package sbr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/sbr"
)

// world is a pod with two interfaces, eth0 (10.61.1.2/24) and net1
// (10.61.2.2/24), both cabled to a router namespace (10.61.1.1, 10.61.2.1)
// that also reaches a client (10.61.9.2) and drops packets that arrive on
// the wrong interface (strict rp_filter). The pod's default route is
// through eth0, as a main plugin leaves it.
type world struct {
	n                   *roletest.Node
	pod                 roletest.Pod
	router, client      string
	eth0, net1, clientA netip.Addr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newWorld(t *testing.T) *world {
	n := roletest.NewNode(t, sbr.Role)
	w := &world{n: n, pod: n.NewPod("sbr"), router: nstest.NewNS(t, "sbrrt"), client: nstest.NewNS(t, "sbrcl"),
		eth0: netip.MustParseAddr("10.61.1.2"), net1: netip.MustParseAddr("10.61.2.2"), clientA: netip.MustParseAddr("10.61.9.2")}
	r, p, c := roletest.Open(t, w.router), roletest.Open(t, w.pod.Netns), roletest.Open(t, w.client)
	for _, v := range []struct {
		host, peer string
		peerH      *netops.Handle
		hostA      string
		peerA      string
	}{
		{"r1", "eth0", p, "10.61.1.1/24", "10.61.1.2/24"},
		{"r2", "net1", p, "10.61.2.1/24", "10.61.2.2/24"},
		{"r0", "eth0", c, "10.61.9.1/24", "10.61.9.2/24"},
	} {
		_, _, err := r.EnsureVeth(netops.VethOpts{HostName: v.host, PeerName: v.peer, Peer: v.peerH})
		must(t, err)
		must(t, r.EnsureAddr(v.host, netip.MustParsePrefix(v.hostA), netops.AddrOpts{}))
		must(t, v.peerH.EnsureAddr(v.peer, netip.MustParsePrefix(v.peerA), netops.AddrOpts{}))
	}
	must(t, r.SetSysctls(netops.SysctlSetting{Key: "net.ipv4.ip_forward", Value: "1"},
		netops.SysctlSetting{Key: "net.ipv4.conf.all.rp_filter", Value: "1"}))
	must(t, p.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.61.1.1"), Dev: "eth0"}))
	must(t, c.EnsureRoute(netops.Route{GW: netip.MustParseAddr("10.61.9.1"), Dev: "eth0"}))
	return w
}

// answers reports whether the pod answers the client's ping at a.
func (w *world) answers(t *testing.T, a netip.Addr) bool {
	t.Helper()
	_, err := roletest.Open(t, w.client).Ping(a, 1500*time.Millisecond)
	if err != nil && !errors.Is(err, netops.ErrNoAnswer) {
		t.Fatalf("ping %s: %v", a, err)
	}
	return err == nil
}

// conf is an sbr config for interface ifname with address addr/24 and
// gateway gw in prevResult, plus fields.
func (w *world) conf(t *testing.T, ifname string, addr netip.Addr, gw string, fields map[string]any) []byte {
	idx := 0
	prev := &current.Result{CNIVersion: "1.0.0",
		Interfaces: []*current.Interface{{Name: ifname, Sandbox: w.pod.Netns}},
		IPs: []*current.IPConfig{{Interface: &idx, Address: net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(24, 32)},
			Gateway: net.ParseIP(gw)}}}
	b, err := json.Marshal(prev)
	must(t, err)
	all := map[string]any{"prevResult": json.RawMessage(b)}
	for k, v := range fields {
		all[k] = v
	}
	return roletest.With(t, []byte(`{"cniVersion":"1.0.0","name":"sbrnet","type":"sbr"}`), all)
}

func rulesFrom(t *testing.T, ns string, a netip.Addr) []int {
	t.Helper()
	rules, err := roletest.Open(t, ns).Rules()
	must(t, err)
	var tables []int
	for _, r := range rules {
		if r.Src == netip.PrefixFrom(a, 32) {
			tables = append(tables, r.Table)
		}
	}
	return tables
}

// TestTwoInterfaces: without sbr the pod answers only on eth0 (its replies
// from net1's address leave by eth0 and the router drops them); with sbr on
// both interfaces it answers on both; DEL (twice) takes the rules away.
func TestTwoInterfaces(t *testing.T) {
	w := newWorld(t)
	if !w.answers(t, w.eth0) || w.answers(t, w.net1) {
		t.Fatal("before sbr: want an answer on eth0 and none on net1 (the test's router is not as meant)")
	}
	c0 := w.conf(t, "eth0", w.eth0, "10.61.1.1", nil)
	c1 := w.conf(t, "net1", w.net1, "10.61.2.1", nil)
	for i := 0; i < 2; i++ { // a repeated ADD changes nothing
		out := w.n.Must(sbr.Role, "ADD", w.pod, c0)
		if r := roletest.Result(t, out, "1.0.0"); len(r.IPs) != 1 {
			t.Fatalf("ADD result %s, want prevResult passed through", out)
		}
		w.n.Must(sbr.Role, "ADD", w.pod, c1, "CNI_IFNAME", "net1")
	}
	if got := fmt.Sprint(rulesFrom(t, w.pod.Netns, w.eth0), rulesFrom(t, w.pod.Netns, w.net1)); got != "[100] [101]" {
		t.Errorf("tables of the rules from eth0's and net1's addresses: %s, want [100] [101]", got)
	}
	if !w.answers(t, w.eth0) || !w.answers(t, w.net1) {
		t.Fatal("with sbr: want answers on both interfaces")
	}
	pod := roletest.Open(t, w.pod.Netns)
	in101, err := pod.TableRoutes("net1", 101)
	must(t, err)
	if got := fmt.Sprint(in101); !strings.Contains(got, "0.0.0.0/0 via 10.61.2.1 dev net1 table 101") || !strings.Contains(got, "10.61.2.0/24 dev net1 src 10.61.2.2 table 101") {
		t.Errorf("table 101: %s, want net1's default and subnet routes", got)
	}
	if main, err := pod.Routes("net1"); err != nil || len(main) != 0 {
		t.Errorf("net1's routes left in the main table: %v (%v)", main, err)
	}
	w.n.Must(sbr.Role, "CHECK", w.pod, c0)
	w.n.Must(sbr.Role, "CHECK", w.pod, c1, "CNI_IFNAME", "net1")
	for i := 0; i < 2; i++ {
		w.n.Must(sbr.Role, "DEL", w.pod, c1, "CNI_IFNAME", "net1")
	}
	if got := rulesFrom(t, w.pod.Netns, w.net1); len(got) != 0 {
		t.Errorf("after DEL: rules from net1's address to %v", got)
	}
	if in101, err := pod.TableRoutes("net1", 101); err != nil || len(in101) != 0 {
		t.Errorf("after DEL: table 101 holds %v (%v)", in101, err)
	}
	if _, err := w.n.Call(sbr.Role, "CHECK", w.pod, c1, "CNI_IFNAME", "net1"); err == nil {
		t.Error("CHECK after DEL succeeded, want the missing rule reported")
	}
	if got := rulesFrom(t, w.pod.Netns, w.eth0); fmt.Sprint(got) != "[100]" {
		t.Errorf("DEL of net1 touched eth0's rule: %v", got)
	}
}

// TestFixedTable: with table set, sbr adds only the rule to it.
func TestFixedTable(t *testing.T) {
	w := newWorld(t)
	c := w.conf(t, "net1", w.net1, "10.61.2.1", map[string]any{"table": 1234})
	w.n.Must(sbr.Role, "ADD", w.pod, c, "CNI_IFNAME", "net1")
	if got := fmt.Sprint(rulesFrom(t, w.pod.Netns, w.net1)); got != "[1234]" {
		t.Errorf("rules from net1's address to %s, want [1234]", got)
	}
	routes, err := roletest.Open(t, w.pod.Netns).Routes("net1")
	must(t, err)
	if len(routes) == 0 {
		t.Error("with a fixed table, net1's routes left the main table")
	}
	w.n.Must(sbr.Role, "CHECK", w.pod, c, "CNI_IFNAME", "net1")
	w.n.Must(sbr.Role, "DEL", w.pod, c, "CNI_IFNAME", "net1")
	w.n.Must(sbr.Role, "DEL", w.pod, c, "CNI_IFNAME", "net1")
	if got := rulesFrom(t, w.pod.Netns, w.net1); len(got) != 0 {
		t.Errorf("after DEL: rules %v", got)
	}
}

// TestDelGone: DEL with the namespace gone succeeds.
func TestDelGone(t *testing.T) {
	n := roletest.NewNode(t, sbr.Role)
	p := roletest.Pod{ID: "gone", Netns: "/run/netns/cbx-sbr-no-such-ns"}
	n.Must(sbr.Role, "DEL", p, []byte(`{"cniVersion":"1.0.0","name":"sbrnet","type":"sbr"}`))
}

func TestConfErrors(t *testing.T) {
	n := roletest.NewNode(t, sbr.Role)
	p := n.NewPod("sbrconf")
	for _, tc := range []struct {
		name   string
		fields map[string]any
		code   uint
	}{
		{"main table", map[string]any{"table": 254}, 7},
		{"negative table", map[string]any{"table": -1}, 7},
		{"three gateways", map[string]any{"gateways": []string{"10.0.0.1", "fd00::1", "10.0.0.2"}}, 7},
		{"two IPv4 gateways", map[string]any{"gateways": []string{"10.0.0.1", "10.0.0.2"}}, 7},
		{"not an address", map[string]any{"gateways": []string{"x"}}, 7},
		{"no prevResult", nil, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := roletest.With(t, []byte(`{"cniVersion":"1.0.0","name":"sbrnet","type":"sbr"}`), tc.fields)
			_, err := n.Call(sbr.Role, "ADD", p, conf)
			if got := roletest.Code(err); got != tc.code {
				t.Errorf("code %d (%v), want %d", got, err, tc.code)
			}
		})
	}
}

// TestRollback: an ADD whose default route the kernel refuses (a gateway
// off every subnet) fails with code 5 and leaves no rule, no table and the
// main table as it was.
func TestRollback(t *testing.T) {
	w := newWorld(t)
	pod := roletest.Open(t, w.pod.Netns)
	before, err := pod.Routes("net1")
	must(t, err)
	c := w.conf(t, "net1", w.net1, "10.61.2.1", map[string]any{"gateways": []string{"10.200.0.1"}})
	if _, err := w.n.Call(sbr.Role, "ADD", w.pod, c, "CNI_IFNAME", "net1"); roletest.Code(err) != 5 {
		t.Fatalf("ADD through an unreachable gateway: %v, want code 5", err)
	}
	if got := rulesFrom(t, w.pod.Netns, w.net1); len(got) != 0 {
		t.Errorf("rules left: %v", got)
	}
	if in, err := pod.TableRoutes("net1", 100); err != nil || len(in) != 0 {
		t.Errorf("table 100 holds %v (%v)", in, err)
	}
	after, err := pod.Routes("net1")
	must(t, err)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("main table of net1: %v, want %v", after, before)
	}
}
