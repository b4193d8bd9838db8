package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/store"
)

// doctorNode is a node with every role, a store in a temporary
// directory and a LAN namespace behind its NIC lan0 (the LAN router
// 10.62.0.1 untagged). The roles run in process, as a runtime would exec
// them (roletest is internal to roles/).
type doctorNode struct {
	t    *testing.T
	dir  string
	reg  *cniplug.Registry
	host *netops.Handle
	lan  string
}

// pod is a container ID and its network namespace.
type pod struct{ id, netns string }

var podSeq atomic.Int64

func newDoctorNode(t *testing.T) *doctorNode {
	nstest.RequireRoot(t)
	host := openNS(t, "")
	lan := nstest.NewNS(t, "lan")
	l := openNS(t, lan)
	if _, _, err := host.EnsureVeth(netops.VethOpts{HostName: "lan0", PeerName: "eth0", Peer: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("lan0"); host.DeleteLink("cbxdoc0") })
	mustDo(t, l.EnsureAddr("eth0", netip.MustParsePrefix("10.62.0.1/24"), netops.AddrOpts{NoDAD: true}))
	mustDo(t, l.SetLinkUp("eth0"))
	mustDo(t, host.SetLinkUp("lan0"))
	return &doctorNode{t: t, dir: t.TempDir(), reg: roles.Registry(), host: host, lan: lan}
}

func (n *doctorNode) newPod(name string) pod {
	return pod{id: fmt.Sprintf("%s-%d", name, podSeq.Add(1)), netns: nstest.NewNS(n.t, "docpod")}
}

// must runs one CNI call of role typ for p with conf, failing the test on
// an error.
func (n *doctorNode) must(typ, cmd string, p pod, conf []byte) {
	n.t.Helper()
	role, ok := n.reg.Lookup(typ)
	if !ok {
		n.t.Fatalf("no role %s", typ)
	}
	e := map[string]string{
		"CNI_COMMAND": cmd, "CNI_CONTAINERID": p.id, "CNI_NETNS": p.netns, "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.id, store.EnvDataDir: n.dir,
	}
	var stderr bytes.Buffer
	if _, err := cniplug.Invoke(context.Background(), role, cniplug.Invocation{
		Getenv: func(k string) string { return e[k] }, Stdin: bytes.NewReader(conf), Stderr: &stderr, Registry: n.reg,
	}); err != nil {
		n.t.Fatalf("%s %s %s: %v (stderr: %s)", typ, cmd, p.id, err, stderr.String())
	}
}

// endpoints returns the endpoint records of network.
func (n *doctorNode) endpoints(network string) []store.Endpoint {
	n.t.Helper()
	st, err := store.Open(n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	defer st.Close()
	eps, err := st.Endpoints(network)
	if err != nil {
		n.t.Fatal(err)
	}
	return eps
}

func openNS(t *testing.T, ns string) *netops.Handle {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// doctorConf is a network of role typ with extra fields and host-local
// addresses from subnet (gateway .1), or no ipam when subnet is "".
func doctorConf(name, typ, extra, subnet string) []byte {
	ipam := ""
	if subnet != "" {
		ipam = fmt.Sprintf(`,"ipam":{"type":"host-local","ranges":[[{"subnet":%q,"rangeStart":"%s"}]]}`, subnet, strings.TrimSuffix(subnet, "0/24")+"10")
	}
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":%q%s%s}`, name, typ, extra, ipam))
}

// examine runs doctor's endpoint checks on the one record of network and
// returns the results.
func (n *doctorNode) examine(t *testing.T, network string) []checkResult {
	t.Helper()
	eps := n.endpoints(network)
	if len(eps) != 1 {
		t.Fatalf("endpoint records of %s = %+v, want one", network, eps)
	}
	d := &doctor{roles: n.reg, view: nodestate.Options{DataDir: n.dir}}
	d.checkNode(n.host, eps)
	d.checkEndpoint(n.host, eps[0], nil)
	return d.results
}

func find(rs []checkResult, check, status string) (checkResult, bool) {
	i := slices.IndexFunc(rs, func(r checkResult) bool { return r.Check == check && r.Status == status })
	if i < 0 {
		return checkResult{}, false
	}
	return rs[i], true
}

// TestDoctorEndpointKinds: doctor's endpoint checks pass for a healthy
// attachment of every interface role, with the checks that fit its kind
// (a ptp veth's host address and /32 route instead of a bridge, a device's
// master, a vlan's ID, a host-device's name on the node; no gateway ping
// through a dummy or a tap) and no bridge line that names no bridge.
func TestDoctorEndpointKinds(t *testing.T) {
	n := newDoctorNode(t)
	l := openNS(t, n.lan)
	vlanErr := func() error {
		_, err := l.EnsureVlan(netops.VlanOpts{Name: "eth0.5", Master: "eth0", ID: 5})
		if err == nil {
			mustDo(t, l.EnsureAddr("eth0.5", netip.MustParsePrefix("10.62.5.1/24"), netops.AddrOpts{NoDAD: true}))
			mustDo(t, l.SetLinkUp("eth0.5"))
		}
		return err
	}()
	for _, tc := range []struct {
		network, typ, extra, subnet string
		feature                     string // a kernel feature the host may lack
		setup                       func(t *testing.T) error
		want                        []string // checks that must pass
		absent                      []string // checks that must not appear
	}{
		{network: "br", typ: "bridge", extra: `,"bridge":"cbxdoc0","isGateway":true`, subnet: "10.62.1.0/24",
			want: []string{"host veth", "interface", "address", "gateway", "mtu"}, absent: []string{"host route", "master"}},
		{network: "ptp", typ: "ptp", subnet: "10.62.2.0/24",
			want: []string{"host veth", "host address", "host route", "interface", "address", "gateway", "mtu", "forwarding"}},
		{network: "mv", typ: "macvlan", extra: `,"master":"lan0"`, subnet: "10.62.0.0/24",
			want: []string{"master", "interface", "address", "gateway"}, absent: []string{"host veth", "forwarding"}},
		{network: "ipv", typ: "ipvlan", extra: `,"master":"lan0"`, subnet: "10.62.0.0/24", feature: "ipvlan",
			setup: func(t *testing.T) error {
				_, err := l.EnsureIpvlan(netops.SubLinkOpts{Name: "probe", Master: "eth0", Mode: "l2"})
				if err == nil {
					l.DeleteLink("probe")
				}
				return err
			},
			want: []string{"master", "interface", "address", "gateway"}},
		{network: "vl", typ: "vlan", extra: `,"master":"lan0","vlanId":5`, subnet: "10.62.5.0/24", feature: "802.1Q (8021q)",
			setup: func(*testing.T) error { return vlanErr },
			want:  []string{"master", "interface", "vlan", "address", "gateway"}},
		{network: "hd", typ: "host-device", extra: `,"device":"hd0"`, subnet: "10.62.3.0/24",
			setup: func(t *testing.T) error {
				// The device's other end is a router of its own LAN.
				if _, _, err := n.host.EnsureVeth(netops.VethOpts{HostName: "hd0", PeerName: "hd0peer", Peer: l}); err != nil {
					return err
				}
				t.Cleanup(func() { n.host.DeleteLink("hd0") })
				mustDo(t, l.EnsureAddr("hd0peer", netip.MustParsePrefix("10.62.3.1/24"), netops.AddrOpts{NoDAD: true}))
				return l.SetLinkUp("hd0peer")
			},
			want: []string{"interface", "device", "address", "gateway"}, absent: []string{"host veth", "master"}},
		{network: "dm", typ: "dummy", subnet: "10.62.4.0/24", feature: "dummy",
			setup: func(t *testing.T) error {
				_, err := l.EnsureDummy("probe")
				if err == nil {
					l.DeleteLink("probe")
				}
				return err
			},
			want: []string{"interface", "address"}, absent: []string{"gateway", "forwarding"}},
		{network: "tp", typ: "tap", subnet: "10.62.6.0/24",
			want: []string{"interface", "address"}, absent: []string{"gateway", "host veth"}},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			if tc.setup != nil {
				err := tc.setup(t)
				nstest.SkipIfKernelLacks(t, tc.feature, err)
				mustDo(t, err)
			}
			c := doctorConf(tc.network, tc.typ, tc.extra, tc.subnet)
			p := n.newPod(tc.network)
			n.must(tc.typ, "ADD", p, c)
			defer n.must(tc.typ, "DEL", p, c)
			rs := n.examine(t, tc.network)
			for _, r := range rs {
				if r.Status != statusPass {
					t.Errorf("%s on a healthy %s attachment: %+v", r.Status, tc.typ, r)
				}
				if strings.Contains(r.Detail, "of -") {
					t.Errorf("a line names no bridge: %+v", r)
				}
			}
			for _, c := range tc.want {
				if _, ok := find(rs, c, statusPass); !ok {
					t.Errorf("no passing %q check for %s: %+v", c, tc.typ, rs)
				}
			}
			for _, c := range tc.absent {
				if i := slices.IndexFunc(rs, func(r checkResult) bool { return r.Check == c }); i >= 0 {
					t.Errorf("a %q check for %s: %+v", c, tc.typ, rs[i])
				}
			}
		})
	}
}

// TestDoctorEndpointDamage: doctor fails naming the broken thing, with a
// fix, when a ptp pod's host route or host address is gone, a macvlan's
// master is down, or a pod's device was replaced by another kind.
func TestDoctorEndpointDamage(t *testing.T) {
	n := newDoctorNode(t)
	for _, tc := range []struct {
		name, network, typ, extra, subnet string
		check                             string
		breakIt                           func(t *testing.T, p pod, ep store.Endpoint) string
	}{
		{"ptp host route deleted", "ptp", "ptp", "", "10.62.2.0/24", "host route", func(t *testing.T, _ pod, ep store.Endpoint) string {
			ip := ep.IPs[0].Addr()
			mustDo(t, n.host.DeleteRoute(netops.Route{Dst: netip.PrefixFrom(ip, 32), Dev: ep.HostVeth}))
			return ip.String() + "/32 dev " + ep.HostVeth
		}},
		{"ptp gateway address deleted", "ptp", "ptp", "", "10.62.2.0/24", "host address", func(t *testing.T, _ pod, ep store.Endpoint) string {
			gw := ep.Gateways[0]
			mustDo(t, n.host.DeleteAddr(ep.HostVeth, netip.PrefixFrom(gw, 32)))
			return gw.String()
		}},
		{"macvlan master down", "mv", "macvlan", `,"master":"lan0"`, "10.62.0.0/24", "master", func(t *testing.T, _ pod, _ store.Endpoint) string {
			mustDo(t, n.host.SetLinkDown("lan0"))
			t.Cleanup(func() { n.host.SetLinkUp("lan0") })
			return "lan0 is down"
		}},
		{"tap replaced by a veth", "tp", "tap", "", "", "interface", func(t *testing.T, p pod, _ store.Endpoint) string {
			pod := openNS(t, p.netns)
			mustDo(t, pod.DeleteLink("eth0"))
			if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0peer", Peer: pod}); err != nil {
				t.Fatal(err)
			}
			mustDo(t, pod.SetLinkUp("eth0"))
			return "a veth device"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := doctorConf(tc.network, tc.typ, tc.extra, tc.subnet)
			p := n.newPod(tc.network)
			n.must(tc.typ, "ADD", p, c)
			defer n.must(tc.typ, "DEL", p, c)
			if _, failed := find(n.examine(t, tc.network), tc.check, statusFail); failed {
				t.Fatalf("%s fails before the damage", tc.check)
			}
			name := tc.breakIt(t, p, n.endpoints(tc.network)[0])
			r, failed := find(n.examine(t, tc.network), tc.check, statusFail)
			if !failed || !strings.Contains(r.Detail, name) || r.Fix == "" {
				t.Errorf("after %s: %q line = %+v (failed %v), want a failure naming %q with a fix", tc.name, tc.check, r, failed, name)
			}
		})
	}
}
