package mnp

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/store"
)

// TestTrustLocal: the node's pods' addresses on their secondary networks
// are the multi role's recorded results, whatever their network-status
// says (a forged address is dropped, an interface with no record has
// none); other nodes' pods keep their annotation's; no store is no
// record.
func TestTrustLocal(t *testing.T) {
	dir := t.TempDir()
	if rec, err := recordedIPs(dir); err != nil || rec != nil {
		t.Fatalf("recordedIPs without a store: %v, %v", rec, err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	res := func(addrs ...string) json.RawMessage {
		var ips []map[string]string
		for _, a := range addrs {
			ips = append(ips, map[string]string{"address": a})
		}
		b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "ips": ips})
		return b
	}
	for _, r := range []delegaterec.Record{
		{Network: "multus", ContainerID: "c1", IfName: "eth0", Pod: "a/local", Plugin: "multi", Delegates: []delegaterec.Delegate{
			{Name: "primary", IfName: "eth0", Result: res("10.244.1.5/24")},
			{Name: "m1", IfName: "net1", Result: res("192.0.2.5/24", "2001:db8::5/64")},
		}},
		{Network: "flannel", ContainerID: "c2", IfName: "eth0", Pod: "a/other", Plugin: "flannel", Delegates: []delegaterec.Delegate{
			{Name: "cbr0", IfName: "net1", Result: res("192.0.2.66/24")}, // not multi's
		}},
	} {
		if err := delegaterec.Records.In(st).Put(r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	rec, err := recordedIPs(dir)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, node string, atts ...Attachment) *Pod {
		return &Pod{Namespace: "a", Name: name, Node: node, Attachments: atts}
	}
	forged := []netip.Addr{netip.MustParseAddr("198.51.100.9")}
	in := Input{Node: "n1", Pods: []*Pod{
		pod("local", "n1", Attachment{Network: "a/m1", Iface: "net1", IPs: forged}, Attachment{Network: "a/m2", Iface: "net2", IPs: forged}),
		pod("other", "n1", Attachment{Network: "a/m1", Iface: "net1", IPs: forged}),
		pod("remote", "n2", Attachment{Network: "a/m1", Iface: "net1", IPs: forged}),
	}}
	out := trustLocal(in, "n1", rec)
	want := []netip.Addr{netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")}
	if got := out.Pods[0].Attachments[0].IPs; !slices.Equal(got, want) {
		t.Errorf("local's net1: %v, want the recorded %v", got, want)
	}
	if got := out.Pods[0].Attachments[1].IPs; got != nil {
		t.Errorf("local's net2, which no ADD recorded: %v, want none", got)
	}
	if got := out.Pods[1].Attachments[0].IPs; got != nil {
		t.Errorf("a pod with no multi record: %v, want none", got)
	}
	if got := out.Pods[2].Attachments[0].IPs; !slices.Equal(got, forged) {
		t.Errorf("another node's pod: %v, want its annotation's", got)
	}
	if !slices.Equal(in.Pods[0].Attachments[0].IPs, forged) {
		t.Error("trustLocal changed its input's pods")
	}
}
