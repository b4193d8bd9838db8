package ptp_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/ptp"
)

// TestBadInput: bad input gets the CNI code of its kind and a message that
// names the field, and leaves nothing behind.
func TestBadInput(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("bad")
	for _, tc := range []struct {
		name string
		conf string
		code uint
		says string
	}{
		{"mtu", string(conf("1.0.0", v4, `,"mtu":-1`)), 7, `"mtu"`},
		{"mtu type", string(conf("1.0.0", v4, `,"mtu":"big"`)), 6, `config field "mtu"`},
		{"backend", string(conf("1.0.0", v4, `,"ipMasqBackend":"pf"`)), 2, `"ipMasqBackend"`},
		{"no ipam", `{"cniVersion":"1.0.0","name":"ptpnet","type":"ptp"}`, 7, `"ipam"`},
		{"json", `{"cniVersion":`, 6, "JSON"},
		{"version", string(conf("9.9.9", v4, "")), 1, `"cniVersion"`},
		{"subnet", string(conf("1.0.0", `[[{"subnet":"10.77.0.0/33"}]]`, "")), 7, "subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(ptp.Role, "ADD", p, []byte(tc.conf))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: code %d, error %v; want code %d naming %s", roletest.Code(err), err, tc.code, tc.says)
			}
		})
	}
	_, err := n.Call(ptp.Role, "ADD", p, conf("1.0.0", v4, ""), "CNI_NETNS", "/run/netns/no-such-pod")
	if roletest.Code(err) != 3 {
		t.Errorf("ADD into a missing netns: %v, want code 3", err)
	}
	n.Empty("ptpnet")
}

// TestIfnameTaken: CNI_IFNAME already in the pod (not ours) is refused with
// code 101 and the pod's interface is left alone.
func TestIfnameTaken(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("taken")
	pod := roletest.Open(t, p.Netns)
	if _, _, err := pod.EnsureIfb("eth0", 0); err != nil {
		t.Fatal(err)
	}
	_, err := n.Call(ptp.Role, "ADD", p, conf("1.0.0", v4, ""))
	if roletest.Code(err) != cniplug.CodeIfaceExists {
		t.Fatalf("ADD: %v, want code %d", err, cniplug.CodeIfaceExists)
	}
	if l, err := pod.LinkByName("eth0"); err != nil || l.Kind != "ifb" {
		t.Errorf("the pod's own eth0 is gone or changed: %+v %v", l, err)
	}
	n.Empty("ptpnet")
}

// TestUndo: an ADD that fails after the veth (an IPAM route whose gateway no
// route reaches) leaves no veth, record, reservation or masquerade entry.
func TestUndo(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("undo")
	c := []byte(`{"cniVersion":"1.0.0","name":"ptpnet","type":"ptp","ipMasq":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/24"}]],"routes":[{"dst":"192.168.0.0/16","gw":"172.31.0.1"}]}}`)
	_, err := n.Call(ptp.Role, "ADD", p, c)
	if err == nil || !strings.Contains(err.Error(), "192.168.0.0/16") {
		t.Fatalf("ADD with an unreachable route gateway: %v, want the route's error", err)
	}
	host := roletest.Open(t, "")
	if _, err := host.LinkByName(attach.HostVethName(p.ID, "eth0")); err == nil {
		t.Error("host veth left after a failed ADD")
	}
	if names := links(t, p.Netns); slices.Contains(names, "eth0") {
		t.Errorf("pod interfaces after a failed ADD: %v", names)
	}
	if es, _ := host.NFT().MasqEntries(); len(es) > 0 {
		t.Errorf("masquerade entries after a failed ADD: %v", es)
	}
	n.Empty("ptpnet")
}

// TestDelNetnsGone: DEL works (twice) once the pod's namespace is gone and
// removes the host veth, the masquerade entries, record and addresses.
func TestDelNetnsGone(t *testing.T) {
	n := newNode(t)
	p := n.NewPod("gone")
	c := conf("1.0.0", dual, `,"ipMasq":true`)
	n.Must(ptp.Role, "ADD", p, c)
	host := roletest.Open(t, "")
	if es, _ := host.NFT().MasqEntries(); len(es) != 2 {
		t.Fatalf("masquerade entries after ADD: %v, want 2", es)
	}
	name := strings.TrimPrefix(p.Netns, "/run/netns/")
	if err := netops.DeleteNamedNS(name); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n.Must(ptp.Role, "DEL", p, c)
	}
	if _, err := netops.CreateNamedNS(name); err != nil { // for the test's cleanup
		t.Fatal(err)
	}
	if _, err := host.LinkByName(attach.HostVethName(p.ID, "eth0")); err == nil {
		t.Error("host veth left after DEL")
	}
	if es, _ := host.NFT().MasqEntries(); len(es) > 0 {
		t.Errorf("masquerade entries after DEL: %v", es)
	}
	n.Empty("ptpnet")
}

func links(t *testing.T, ns string) []string {
	t.Helper()
	ls, err := roletest.Open(t, ns).Links()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	return names
}
