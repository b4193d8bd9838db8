package vlan_test

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/vlan"
)

// TestConfigErrors: bad input is refused before any kernel work with the
// code of its kind and a message naming the field; nothing is left. These
// run on any kernel.
func TestConfigErrors(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("bad")
	for _, tc := range []struct {
		name, extra string
		code        uint
		says        string
	}{
		{"no vlanId", `,"master":"lan0"`, 7, `"vlanId"`},
		{"vlanId 4095", `,"master":"lan0","vlanId":4095`, 7, `"vlanId"`},
		{"negative vlanId", `,"master":"lan0","vlanId":-1`, 7, `"vlanId"`},
		{"vlanId not a number", `,"master":"lan0","vlanId":"42"`, 6, `config field "vlanId"`},
		{"mode", `,"master":"lan0","vlanId":42,"mode":"bridge"`, 2, `drop "mode"`},
		{"no such master", `,"master":"nope0","vlanId":42`, 7, `"master"`},
		{"master not a name", `,"master":"a/b","vlanId":42`, 7, `"master"`},
		{"master only in the pod", `,"master":"lan0","vlanId":42,"linkInContainer":true`, 7, `drop "linkInContainer"`},
		{"mtu above the master's", `,"master":"lan0","vlanId":42,"mtu":9000`, 7, `"mtu"`},
		{"negative mtu", `,"master":"lan0","vlanId":42,"mtu":-1`, 7, `"mtu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(vlan.Role, "ADD", p, conf("1.1.0", v4, tc.extra))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: %v; want code %d saying %s", err, tc.code, tc.says)
			}
		})
	}
	if _, err := n.Call(vlan.Role, "ADD", p, []byte(`{"cniVersion":"1.1.0","name":"vlnet","type":"vlan",`)); roletest.Code(err) != 6 {
		t.Errorf("ADD of broken JSON: %v, want code 6", err)
	}
	if _, err := n.Call(vlan.Role, "ADD", p, conf("0.2.0", v4, `,"master":"lan0","vlanId":42`)); roletest.Code(err) != 1 {
		t.Errorf("ADD at spec version 0.2.0: %v, want code 1", err)
	}
	if _, err := open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("a refused ADD left eth0 in the pod")
	}
	n.Empty("vlnet")
}

// TestIfaceExists: CNI_IFNAME already in the pod is code 101 and stays as
// it was.
func TestIfaceExists(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("exists")
	pod := open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0p", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(vlan.Role, "ADD", p, conf("1.1.0", v4, `,"master":"lan0","vlanId":42`)); roletest.Code(err) != 101 {
		t.Errorf("ADD over an existing eth0: %v, want code 101", err)
	}
	if l, err := pod.LinkByName("eth0"); err != nil || l.Kind != "veth" {
		t.Errorf("the pod's eth0 = %+v, %v; want the veth untouched", l, err)
	}
	n.Empty("vlnet")
}

// TestNoDefaultRoute: without "master" and without a default route to take
// it from, ADD says to set "master".
func TestNoDefaultRoute(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("nodef")
	_, err := n.Call(vlan.Role, "ADD", p, conf("1.1.0", v4, `,"vlanId":42`))
	if roletest.Code(err) != 7 || !strings.Contains(err.Error(), `"master"`) || !strings.Contains(err.Error(), "default route") {
		t.Errorf("ADD without master or default route: %v, want code 7 naming master", err)
	}
}
