package bridge_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestPolicyPendingADD: on a node whose NetworkPolicy table says a policy
// could select pods of namespace "default", a pod's ADD puts its address
// in the pending set before the pod has it: other pods cannot reach it
// (nor it them), the node can; its DEL (twice) takes the address out.
// Where the guard does not name the namespace, the ADD leaves the pod open.
func TestPolicyPendingADD(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brpol") })
	if err := host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter: bridged traffic never meets the forward hook (%v)", err)
	}
	h, err := nft.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	gw := netip.MustParseAddr("10.11.9.1")
	table := func(guard ...string) {
		t.Helper()
		err := h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: &policymodel.Rules{NodeAddrs: "node"},
			Sets:  []*policymodel.Set{policymodel.NewSet("node", policymodel.Addrs, "", policymodel.AddrElem(gw))},
			Guard: &nft.PolicyGuard{Namespaces: guard}})
		if err != nil {
			t.Fatal(err)
		}
	}
	table("default")
	t.Cleanup(func() { _ = h.DeletePolicy() })

	c := gwConf("pol", "brpol", 9, "")
	a, b := n.NewPod("pola"), n.NewPod("polb")
	ipa, ipb := podAddr(t, n.Must(bridge.Role, "ADD", a, c)), podAddr(t, n.Must(bridge.Role, "ADD", b, c))
	pend, _, err := h.PolicySetAddrs(nft.PolicyPending)
	if want := []netip.Addr{ipa, ipb}; err != nil || !slices.Equal(pend, want) {
		t.Errorf("pending after the ADDs: %v (%v), want %v", pend, err, want)
	}
	if err := nstest.Probe(t, a.Netns, b.Netns, ipb, false); err == nil {
		t.Error("a reaches b while both are pending")
	}
	if err := nstest.Reachable(t, nodeNS, a.Netns, ipa); err != nil {
		t.Errorf("the node cannot reach pending a: %v", err)
	}
	n.Must(bridge.Role, "DEL", a, c)
	n.Must(bridge.Role, "DEL", a, c)
	if pend, _, _ := h.PolicySetAddrs(nft.PolicyPending); !slices.Equal(pend, []netip.Addr{ipb}) {
		t.Errorf("pending after a's DEL: %v, want [%s]", pend, ipb)
	}
	if att, _, _ := h.PolicySetAddrs(nft.PolicyAttached); !slices.Equal(att, []netip.Addr{ipb}) {
		t.Errorf("attached after a's DEL: %v, want [%s] (the agent reads it to close a pod gone from the API before its DEL)", att, ipb)
	}
	n.Must(bridge.Role, "DEL", b, c)

	table("other") // no policy could select a pod of "default"
	a = n.NewPod("polc")
	ipc := podAddr(t, n.Must(bridge.Role, "ADD", a, c))
	if pend, _, _ := h.PolicySetAddrs(nft.PolicyPending); len(pend) != 0 {
		t.Errorf("pending %v, want none (%s's namespace is not guarded)", pend, ipc)
	}
	if att, _, _ := h.PolicySetAddrs(nft.PolicyAttached); !slices.Equal(att, []netip.Addr{ipc}) {
		t.Errorf("attached %v, want [%s]: every pod's ADD records it", att, ipc)
	}
	n.Must(bridge.Role, "DEL", a, c)
	if att, _, _ := h.PolicySetAddrs(nft.PolicyAttached); len(att) != 0 {
		t.Errorf("attached after the DELs: %v", att)
	}
}

// TestPolicyNoTable: on a node without cnibox-agent's policy table (no
// agent, or its policy off) a Kubernetes pod's ADD and DEL, with the pod
// arguments a runtime passes, succeed without one nftables transaction
// (one refused for the missing table cost every ADD ~11 ms: the kernel's
// abort) and make no table; with the table of an agent that has no
// policy, the ADD records the pod's address in its attached set and the
// DEL takes it out.
func TestPolicyNoTable(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, hostlocal.Role)
	host := openNode(t)
	t.Cleanup(func() { host.DeleteLink("brnot") })
	h, err := nft.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// No masquerade and no source check: the ADD's only nftables work is
	// the policy table's.
	c := gwConf("not", "brnot", 14, `"ipspoofchk":false,`)

	a := n.NewPod("nota")
	before := nft.Transactions()
	n.Must(bridge.Role, "ADD", a, c)
	n.Must(bridge.Role, "DEL", a, c)
	n.Must(bridge.Role, "DEL", a, c)
	if sent := nft.Transactions() - before; sent != 0 {
		t.Errorf("ADD and DEL without the policy table sent %d nftables transactions, want 0", sent)
	}
	if _, ok, err := h.PolicySetAddrs(nft.PolicyAttached); err != nil || ok {
		t.Errorf("after the calls: attached set %v (%v), want no policy table", ok, err)
	}

	err = h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: &policymodel.Rules{NodeAddrs: "node"},
		Sets:  []*policymodel.Set{policymodel.NewSet("node", policymodel.Addrs, "", policymodel.AddrElem(netip.MustParseAddr("10.11.14.1")))},
		Guard: &nft.PolicyGuard{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.DeletePolicy() })
	b := n.NewPod("notb")
	ipb := podAddr(t, n.Must(bridge.Role, "ADD", b, c))
	if att, _, err := h.PolicySetAddrs(nft.PolicyAttached); err != nil || !slices.Equal(att, []netip.Addr{ipb}) {
		t.Errorf("attached after the ADD: %v (%v), want [%s]", att, err, ipb)
	}
	n.Must(bridge.Role, "DEL", b, c)
	n.Must(bridge.Role, "DEL", b, c)
	if att, _, err := h.PolicySetAddrs(nft.PolicyAttached); err != nil || len(att) != 0 {
		t.Errorf("attached after the DELs: %v (%v), want none", att, err)
	}
}
