package dummy_test

import (
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/dummy"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// TestConfigErrors: bad input is refused before any kernel work with the
// code of its kind and a message naming the field; nothing is left. These
// run on any kernel.
func TestConfigErrors(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("bad")
	for _, tc := range []struct {
		name, conf string
		code       uint
		says       string
	}{
		{"no ipam", `{"cniVersion":"1.1.0","name":"dmnet","type":"dummy"}`, 7, `"ipam"`},
		{"mode", `{"cniVersion":"1.1.0","name":"dmnet","type":"dummy","mode":"l2","ipam":{"type":"host-local","ranges":[[{"subnet":"10.59.0.0/24"}]]}}`, 2, `drop "mode"`},
		{"broken JSON", `{"cniVersion":"1.1.0","name":"dmnet","type":"dummy",`, 6, ""},
		{"spec version 0.2.0", `{"cniVersion":"0.2.0","name":"dmnet","type":"dummy","ipam":{"type":"host-local","ranges":[[{"subnet":"10.59.0.0/24"}]]}}`, 1, ""},
		{"bad subnet", `{"cniVersion":"1.1.0","name":"dmnet","type":"dummy","ipam":{"type":"host-local","ranges":[[{"subnet":"10.59.0.0/33"}]]}}`, 7, "subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(dummy.Role, "ADD", p, []byte(tc.conf))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: %v; want code %d saying %s", err, tc.code, tc.says)
			}
		})
	}
	noIPAM := []byte(`{"cniVersion":"1.1.0","name":"dmnet","type":"dummy","prevResult":{"cniVersion":"1.1.0"}}`)
	if _, err := n.Call(dummy.Role, "CHECK", p, noIPAM); roletest.Code(err) != 7 || !strings.Contains(err.Error(), `"ipam"`) {
		t.Errorf("CHECK without ipam: %v, want code 7 naming ipam", err)
	}
	if _, err := open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("a refused ADD left eth0 in the pod")
	}
	n.Empty("dmnet")
}

// TestIfaceExists: CNI_IFNAME already in the pod is code 101 and stays as
// it was.
func TestIfaceExists(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("exists")
	pod := open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0p", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(dummy.Role, "ADD", p, conf("1.1.0", v4)); roletest.Code(err) != 101 {
		t.Errorf("ADD over an existing eth0: %v, want code 101", err)
	}
	if l, err := pod.LinkByName("eth0"); err != nil || l.Kind != "veth" {
		t.Errorf("the pod's eth0 = %+v, %v; want the veth untouched", l, err)
	}
	n.Empty("dmnet")
}
