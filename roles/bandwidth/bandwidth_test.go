package bandwidth_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
	"github.com/cnibox/cnibox/store"
)

// tbBandwidth is the node's view of one pod's shaping.
type tbBandwidth struct {
	hostTBF, ifbTBF     netops.TBF
	hostShaped, ifbSeen bool
	ifbShaped           bool
	ifbs                []string // every ifb on the node
	redirectTo          int
	ifbIndex            int
}

// tbShaping reads the qdiscs of a host veth and the ifbs of the node.
func tbShaping(t *testing.T, hostIf string) tbBandwidth {
	t.Helper()
	host, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	var b tbBandwidth
	if hostIf != "" {
		b.hostTBF, b.hostShaped, err = host.RootTBF(hostIf)
		if err != nil {
			t.Fatal(err)
		}
		b.redirectTo, _, err = host.IngressRedirect(hostIf)
		if err != nil {
			t.Fatal(err)
		}
	}
	links, err := host.Links()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Kind != "ifb" {
			continue
		}
		b.ifbs = append(b.ifbs, l.Name)
		b.ifbSeen = true
		b.ifbIndex = l.Index
		b.ifbTBF, b.ifbShaped, err = host.RootTBF(l.Name)
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func bandwidthRecords(n *chaintest.Node) []bandwidth.Record {
	n.T.Helper()
	st, err := store.Open(n.Dir)
	if err != nil {
		n.T.Fatal(err)
	}
	defer st.Close()
	recs, err := bandwidth.Records.In(st).List("")
	if err != nil {
		n.T.Fatal(err)
	}
	return recs
}

var tbLimits = map[string]any{"ingressRate": 1_000_000, "ingressBurst": 100_000, "egressRate": 2_000_000, "egressBurst": 200_000}

// TestBandwidthChain runs bridge + bandwidth at every spec version: a tbf
// with the ingress rate on the host veth, an ifb with the egress rate and
// the redirect to it; CHECK passes; DEL (twice) removes all of it.
func TestBandwidthChain(t *testing.T) {
	for _, v := range chaintest.Versions {
		t.Run(v, func(t *testing.T) {
			n := chaintest.NewNode(t)
			p := n.NewPod("bw")
			prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf(v))
			hostIf := chaintest.Result(t, prev, v).Interfaces[1].Name

			conf := n.Conf(v, "bandwidth", tbLimits, prev)
			out := n.Must(bandwidth.Role, "ADD", p, conf)
			res := chaintest.Result(t, out, v)
			b := tbShaping(t, hostIf)
			if !b.hostShaped || b.hostTBF.Rate != 1_000_000/8 {
				t.Errorf("host veth %s: tbf %v %+v, want rate 125000 bytes/s", hostIf, b.hostShaped, b.hostTBF)
			}
			if len(b.ifbs) != 1 || !b.ifbShaped || b.ifbTBF.Rate != 2_000_000/8 {
				t.Fatalf("ifbs %v, tbf %v %+v; want one ifb shaped to 250000 bytes/s", b.ifbs, b.ifbShaped, b.ifbTBF)
			}
			if b.redirectTo != b.ifbIndex {
				t.Errorf("ingress of %s redirects to ifindex %d, want the ifb's %d", hostIf, b.redirectTo, b.ifbIndex)
			}
			if last := res.Interfaces[len(res.Interfaces)-1]; last.Name != b.ifbs[0] || last.Sandbox != "" {
				t.Errorf("result interfaces %+v: want the ifb %s last", res.Interfaces, b.ifbs[0])
			}
			if v != "0.3.0" && v != "0.3.1" {
				if _, err := n.Call(bandwidth.Role, "CHECK", p, n.Conf(v, "bandwidth", tbLimits, out)); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				other := map[string]any{"ingressRate": 3_000_000, "ingressBurst": 100_000}
				if _, err := n.Call(bandwidth.Role, "CHECK", p, n.Conf(v, "bandwidth", other, out)); err == nil {
					t.Error("CHECK with another ingress rate passed")
				}
			}
			for range 2 {
				n.Must(bandwidth.Role, "DEL", p, n.Conf(v, "bandwidth", tbLimits, out))
			}
			b = tbShaping(t, hostIf)
			if b.hostShaped || b.redirectTo != 0 || len(b.ifbs) != 0 {
				t.Errorf("after DEL: host tbf %v, redirect %d, ifbs %v; want none", b.hostShaped, b.redirectTo, b.ifbs)
			}
			if recs := bandwidthRecords(n); len(recs) != 0 {
				t.Errorf("records after DEL: %+v", recs)
			}
			n.Must(bridge.Role, "DEL", p, n.BridgeConf(v))
		})
	}
}

// TestBandwidthCapability: runtimeConfig.bandwidth replaces the config's
// limits; only ingress there means no ifb.
func TestBandwidthCapability(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("bwcap")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.0.0"))
	hostIf := chaintest.Result(t, prev, "1.0.0").Interfaces[1].Name
	fields := map[string]any{
		"ingressRate": 1_000_000, "ingressBurst": 100_000, "egressRate": 2_000_000, "egressBurst": 200_000,
		"runtimeConfig": map[string]any{"bandwidth": map[string]any{"ingressRate": 8_000_000, "ingressBurst": 800_000}},
	}
	out := n.Must(bandwidth.Role, "ADD", p, n.Conf("1.0.0", "bandwidth", fields, prev))
	b := tbShaping(t, hostIf)
	if !b.hostShaped || b.hostTBF.Rate != 1_000_000 || len(b.ifbs) != 0 {
		t.Errorf("host tbf %v %+v, ifbs %v; want the capability's 1000000 bytes/s and no ifb", b.hostShaped, b.hostTBF, b.ifbs)
	}
	n.Must(bandwidth.Role, "CHECK", p, n.Conf("1.0.0", "bandwidth", fields, out))
	// Repeated with egress only: the ingress tbf goes, the ifb comes.
	egress := map[string]any{"egressRate": 2_000_000, "egressBurst": 200_000}
	n.Must(bandwidth.Role, "ADD", p, n.Conf("1.0.0", "bandwidth", egress, prev))
	if b := tbShaping(t, hostIf); b.hostShaped || len(b.ifbs) != 1 {
		t.Errorf("after the second ADD: host tbf %v, ifbs %v; want no tbf and one ifb", b.hostShaped, b.ifbs)
	}
	for range 2 {
		n.Must(bandwidth.Role, "DEL", p, n.Conf("1.0.0", "bandwidth", egress, out))
	}
	if b := tbShaping(t, hostIf); len(b.ifbs) != 0 || b.redirectTo != 0 {
		t.Errorf("after DEL: ifbs %v, redirect %d", b.ifbs, b.redirectTo)
	}
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.0.0"))
}

// TestBandwidthDelAfterPodGone: the bridge DEL already took the veth; the
// bandwidth DEL still deletes the ifb, with or without a record, and with
// an empty CNI_NETNS.
func TestBandwidthDelAfterPodGone(t *testing.T) {
	n := chaintest.NewNode(t)
	p := n.NewPod("bwgone")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.1.0"))
	conf := n.Conf("1.1.0", "bandwidth", tbLimits, prev)
	n.Must(bandwidth.Role, "ADD", p, conf)
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.1.0"))
	for range 2 {
		n.Must(bandwidth.Role, "DEL", p, conf, "CNI_NETNS", "")
	}
	if b := tbShaping(t, ""); len(b.ifbs) != 0 {
		t.Errorf("ifbs after DEL: %v", b.ifbs)
	}
	// No record (a store that lost it): the ifb goes by its name.
	q := n.NewPod("bwnorec")
	prev = n.Must(bridge.Role, "ADD", q, n.BridgeConf("1.1.0"))
	conf = n.Conf("1.1.0", "bandwidth", tbLimits, prev)
	n.Must(bandwidth.Role, "ADD", q, conf)
	st, err := store.Open(n.Dir)
	if err != nil {
		t.Fatal(err)
	}
	bandwidth.Records.In(st).Delete(n.Network, q.ID, "eth0")
	st.Close()
	for range 2 {
		n.Must(bandwidth.Role, "DEL", q, conf)
	}
	hostIf := chaintest.Result(t, prev, "1.1.0").Interfaces[1].Name
	if b := tbShaping(t, hostIf); len(b.ifbs) != 0 || b.hostShaped || b.redirectTo != 0 {
		t.Errorf("after DEL without a record: ifbs %v, host tbf %v, redirect %d", b.ifbs, b.hostShaped, b.redirectTo)
	}
	n.Must(bridge.Role, "DEL", q, n.BridgeConf("1.1.0"))
}

// TestBandwidthGC tears down the attachments not in the valid list and ifbs
// of cnibox's that no record names, and leaves other ifbs alone.
func TestBandwidthGC(t *testing.T) {
	n := chaintest.NewNode(t)
	a, b := n.NewPod("bwgca"), n.NewPod("bwgcb")
	for _, p := range []chaintest.Pod{a, b} {
		prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.1.0"))
		n.Must(bandwidth.Role, "ADD", p, n.Conf("1.1.0", "bandwidth", tbLimits, prev))
	}
	host, err := netops.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	for _, name := range []string{"cbw0123456789ab", "ifbother0"} {
		if _, _, err := host.EnsureIfb(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	defer host.DeleteLink("ifbother0")
	gc := n.WithKeep(n.Conf("1.1.0", "bandwidth", tbLimits, nil), a)
	for range 2 {
		n.Must(bandwidth.Role, "GC", chaintest.Pod{}, gc)
	}
	recs := bandwidthRecords(n)
	if len(recs) != 1 || recs[0].ContainerID != a.ID {
		t.Fatalf("records after GC = %+v, want only %s's", recs, a.ID)
	}
	got := tbShaping(t, "").ifbs
	if len(got) != 2 || !strings.Contains(strings.Join(got, " "), recs[0].Ifb) || !strings.Contains(strings.Join(got, " "), "ifbother0") {
		t.Errorf("ifbs after GC = %v, want %s and ifbother0", got, recs[0].Ifb)
	}
	for _, p := range []chaintest.Pod{a, b} {
		for range 2 {
			n.Must(bandwidth.Role, "DEL", p, n.Conf("1.1.0", "bandwidth", tbLimits, nil))
		}
		n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.1.0"))
	}
	if got := tbShaping(t, "").ifbs; len(got) != 1 || got[0] != "ifbother0" {
		t.Errorf("ifbs after DEL = %v, want only ifbother0", got)
	}
}

// TestBandwidthRollback: when the redirect cannot be set up (the host veth
// has a clsact qdisc of someone else's), the ingress tbf, the ifb and the
// record are gone again.
func TestBandwidthRollback(t *testing.T) {
	nstest.RequireProgram(t, "tc", "iproute2")
	n := chaintest.NewNode(t)
	p := n.NewPod("bwrb")
	prev := n.Must(bridge.Role, "ADD", p, n.BridgeConf("1.0.0"))
	hostIf := chaintest.Result(t, prev, "1.0.0").Interfaces[1].Name
	if out, err := exec.Command("tc", "qdisc", "add", "dev", hostIf, "clsact").CombinedOutput(); err != nil {
		t.Skipf("tc qdisc add clsact: %v %s", err, out)
	}
	_, err := n.Call(bandwidth.Role, "ADD", p, n.Conf("1.0.0", "bandwidth", tbLimits, prev))
	if err == nil {
		t.Fatal("ADD succeeded over a clsact qdisc")
	}
	if b := tbShaping(t, hostIf); b.hostShaped || len(b.ifbs) != 0 {
		t.Errorf("after the failed ADD: host tbf %v, ifbs %v; want none", b.hostShaped, b.ifbs)
	}
	if recs := bandwidthRecords(n); len(recs) != 0 {
		t.Errorf("records after the failed ADD: %+v", recs)
	}
	n.Must(bridge.Role, "DEL", p, n.BridgeConf("1.0.0"))
}

// TestBandwidthConfig: bad limits are code 7 naming the field; the subnet
// options are not supported (2); no limits passes prevResult through.
func TestBandwidthConfig(t *testing.T) {
	n := chaintest.NewNode(t)
	p := chaintest.Pod{ID: "bwcfg", Netns: "/nonexistent/netns"}
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}]}`
	for _, tc := range []struct {
		name, conf string
		code       uint
		want       string
	}{
		{"rate without burst", `"ingressRate":1000`, 7, `"ingressBurst"`},
		{"burst without rate", `"egressBurst":1000`, 7, `"egressRate"`},
		{"capability", `"runtimeConfig":{"bandwidth":{"egressRate":1000}}`, 7, `"runtimeConfig.bandwidth.egressBurst"`},
		{"negative", `"ingressRate":-5,"ingressBurst":10`, 7, `"ingressRate"`},
		{"fraction", `"ingressRate":1.5,"ingressBurst":10`, 7, `"ingressRate"`},
		{"overflow", `"egressRate":1000,"egressBurst":1e30`, 7, `"egressBurst"`},
		{"burst 4 GiB", `"egressRate":1000,"egressBurst":34359738360`, 7, `"egressBurst"`},
		{"tiny rate", `"ingressRate":4,"ingressBurst":1000`, 7, `"ingressRate"`},
		{"subnets", `"unshapedSubnets":["10.0.0.0/8"]`, 2, "unshapedSubnets"},
		{"no prevResult", `"ingressRate":1000,"ingressBurst":1000,"prevResult":null`, 7, "prevResult"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := `{"cniVersion":"1.0.0","name":"tbnet","type":"bandwidth",` + tc.conf
			if !strings.Contains(tc.conf, "prevResult") {
				conf += `,"prevResult":` + prev
			}
			_, err := n.Call(bandwidth.Role, "ADD", p, []byte(conf+"}"))
			if chaintest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ADD = %v, want code %d mentioning %s", err, tc.code, tc.want)
			}
		})
	}
	// No limits: prevResult as it was, nothing touched (not even the netns).
	out, err := n.Call(bandwidth.Role, "ADD", p, []byte(`{"cniVersion":"1.0.0","name":"tbnet","type":"bandwidth","prevResult":`+prev+`}`))
	if err != nil || !strings.Contains(string(out), `"eth0"`) {
		t.Errorf("ADD without limits = %s, %v; want prevResult back", out, err)
	}
	// Large numbers that fit: Kubernetes' "no burst limit" (MaxInt32 bits).
	conf := `{"cniVersion":"1.0.0","name":"tbnet","type":"bandwidth","ingressRate":1000000,"ingressBurst":2147483647,"prevResult":` + prev + `}`
	if _, err := n.Call(bandwidth.Role, "ADD", p, []byte(conf)); chaintest.Code(err) != 3 {
		t.Errorf("ADD with a huge burst into a missing netns = %v, want code 3 (valid config)", err)
	}
}
