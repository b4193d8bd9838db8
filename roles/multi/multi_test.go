package multi_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/multi"
)

// muBridge is a bridge network's plugin config (no name/cniVersion: a
// conflist gives them) on bridge br with subnet 10.77.<octet>.0/24.
func muBridge(br, octet string) string {
	return `{"type":"bridge","bridge":"` + br + `","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.` + octet + `.0/24"}]]}}`
}

// muList is an inline conflist.
func muList(name, version string, plugins ...string) string {
	return `{"name":"` + name + `","cniVersion":"` + version + `","plugins":[` + strings.Join(plugins, ",") + `]}`
}

// muSingle is an inline single-plugin network config.
func muSingle(name, version, plugin string) string {
	return `{"name":"` + name + `","cniVersion":"` + version + `",` + strings.TrimPrefix(plugin, "{")
}

func muConf(version string, delegates ...string) string {
	return `{"cniVersion":"` + version + `","name":"multinet","type":"multi","delegates":[` + strings.Join(delegates, ",") + `]}`
}

// podAddr returns the pod's IPv4 address on ifname.
func podAddr(t *testing.T, ns, ifname string) netip.Addr {
	t.Helper()
	h, err := netops.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ps, err := h.Addrs(ifname)
	if err != nil {
		t.Fatalf("addresses of %s in %s: %v", ifname, ns, err)
	}
	for _, p := range ps {
		if p.Addr().Is4() {
			return p.Addr()
		}
	}
	t.Fatalf("%s in %s has no IPv4 address", ifname, ns)
	return netip.Addr{}
}

func hasLink(t *testing.T, ns, name string) bool {
	_, ok := delegatetest.Links(t, ns)[name]
	return ok
}

// TestMultiTwoNetworks: a multi pod on two bridge networks has eth0 (the
// primary, whose result is returned) and net1, each reachable from a pod of
// its own network; CHECK and STATUS pass; DEL twice removes both.
func TestMultiTwoNetworks(t *testing.T) {
	for _, v := range []string{"0.3.1", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := delegatetest.NewNode(t)
			netA := muList("neta", "1.0.0", muBridge("mu-a", "1"))
			netB := muSingle("netb", "1.1.0", muBridge("mu-b", "2"))
			conf := muConf(v, netA, netB)
			peerA, peerB, m := n.NewPod("peera"), n.NewPod("peerb"), n.NewPod("m")
			n.Add(bridge.Role, peerA, muSingle("neta", "1.0.0", muBridge("mu-a", "1")))
			n.Add(bridge.Role, peerB, muSingle("netb", "1.0.0", muBridge("mu-b", "2")))

			res := n.Add(multi.Role, m, conf)
			if res.CNIVersion != v {
				t.Errorf("result cniVersion %q, want the multi config's %q", res.CNIVersion, v)
			}
			ip0 := delegatetest.IP(t, res, "eth0")
			if !netip.MustParsePrefix("10.77.1.0/24").Contains(ip0) {
				t.Errorf("primary result address %s, want one of neta 10.77.1.0/24", ip0)
			}
			for _, ifc := range res.Interfaces {
				if ifc.Name == "net1" {
					t.Errorf("result lists net1: want the primary's result only, got %+v", res.Interfaces)
				}
			}
			if got := podAddr(t, m.Netns, "eth0"); got != ip0 {
				t.Errorf("eth0 has %s, result says %s", got, ip0)
			}
			ip1 := podAddr(t, m.Netns, "net1")
			if !netip.MustParsePrefix("10.77.2.0/24").Contains(ip1) {
				t.Errorf("net1 has %s, want an address of netb 10.77.2.0/24", ip1)
			}
			if err := nstest.Reachable(t, peerA.Netns, m.Netns, ip0); err != nil {
				t.Errorf("neta pod cannot reach the multi pod's eth0 %s: %v", ip0, err)
			}
			if err := nstest.Reachable(t, peerB.Netns, m.Netns, ip1); err != nil {
				t.Errorf("netb pod cannot reach the multi pod's net1 %s: %v", ip1, err)
			}
			if recs := n.Records("multinet"); len(recs) != 1 || len(recs[0].Delegates) != 2 || recs[0].Delegates[1].IfName != "net1" || len(recs[0].Delegates[1].Result) == 0 {
				t.Errorf("record %+v, want two delegates with results, the second on net1", recs)
			}
			if v == "1.1.0" {
				n.Must(multi.Role, "CHECK", m, delegatetest.WithPrev(t, conf, res))
				n.Must(multi.Role, "STATUS", delegatetest.Pod{}, conf)
			}

			n.Must(multi.Role, "DEL", m, conf)
			n.Must(multi.Role, "DEL", m, conf)
			if hasLink(t, m.Netns, "eth0") || hasLink(t, m.Netns, "net1") {
				t.Errorf("pod links after DEL: %v", delegatetest.Links(t, m.Netns))
			}
			for _, net := range []string{"neta", "netb"} {
				if got := n.Reservations(net); len(got[m.ID]) != 0 {
					t.Errorf("%s reservations of the multi pod after DEL: %v", net, got[m.ID])
				}
			}
			if got := n.Records("multinet"); len(got) != 0 {
				t.Errorf("records left after DEL: %+v", got)
			}
			n.Must(bridge.Role, "DEL", peerA, muSingle("neta", "1.0.0", muBridge("mu-a", "1")))
			n.Must(bridge.Role, "DEL", peerB, muSingle("netb", "1.0.0", muBridge("mu-b", "2")))
			if got := delegatetest.Veths(t); len(got) != 0 {
				t.Errorf("veths left: %v", got)
			}
		})
	}
}

// TestMultiCheckFails: CHECK names the delegate whose interface is broken.
func TestMultiCheckFails(t *testing.T) {
	n := delegatetest.NewNode(t)
	conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")), muList("netb", "1.1.0", muBridge("mu-b", "2")))
	m := n.NewPod("m")
	res := n.Add(multi.Role, m, conf)
	h, err := netops.Open(m.Netns)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.DeleteLink("net1"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	_, _, err = n.Call(multi.Role, "CHECK", m, delegatetest.WithPrev(t, conf, res))
	if err == nil || !strings.Contains(err.Error(), `delegates[1] "netb"`) {
		t.Errorf("CHECK with net1 gone = %v, want an error naming delegates[1] \"netb\"", err)
	}
	n.Must(multi.Role, "DEL", m, conf)
	n.Must(multi.Role, "DEL", m, conf)
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
}

// TestMultiRollback: when a later delegate fails, the earlier ones (and the
// failing one's earlier plugins) are deleted: no veth, no reservation, no
// record; the error names the failing delegate and keeps its code.
func TestMultiRollback(t *testing.T) {
	tests := []struct {
		name     string
		second   string
		wantCode uint
		wantMsg  string
	}{
		{
			name:     "a later plugin of the second delegate fails",
			second:   muList("netb", "1.1.0", muBridge("mu-b", "2"), `{"type":"cnibox-test-fail","failAdd":true}`),
			wantCode: 5, wantMsg: `delegates[1] "netb" (type bridge+cnibox-test-fail`,
		},
		{
			name:     "the second delegate's config is invalid",
			second:   muSingle("netb", "1.1.0", `{"type":"bridge","bridge":"mu-b","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.2.0/33"}]]}}`),
			wantCode: 7, wantMsg: `delegates[1] "netb" (type bridge`,
		},
		{
			name:     "the second delegate's plugin does not exist",
			second:   muSingle("netb", "1.1.0", `{"type":"no-such-plugin"}`),
			wantCode: 7, wantMsg: `delegates[1] "netb" (type no-such-plugin`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := delegatetest.NewNode(t)
			conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")), tt.second)
			m := n.NewPod("m")
			_, _, err := n.Call(multi.Role, "ADD", m, conf)
			if err == nil || cniplug.CodeOf(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("ADD = %v (code %d), want code %d naming %s", err, cniplug.CodeOf(err), tt.wantCode, tt.wantMsg)
			}
			if got := delegatetest.Veths(t); len(got) != 0 {
				t.Errorf("veths left after the failed ADD: %v", got)
			}
			if hasLink(t, m.Netns, "eth0") || hasLink(t, m.Netns, "net1") {
				t.Errorf("pod links after the failed ADD: %v", delegatetest.Links(t, m.Netns))
			}
			for _, net := range []string{"neta", "netb"} {
				if got := n.Reservations(net); len(got) != 0 {
					t.Errorf("%s reservations left after the failed ADD: %v", net, got)
				}
			}
			if got := n.Records("multinet"); len(got) != 0 {
				t.Errorf("records left after the failed ADD: %+v", got)
			}
			// The runtime's DEL after a failed ADD succeeds.
			n.Must(multi.Role, "DEL", m, conf)
			n.Must(multi.Role, "DEL", m, conf)
		})
	}
}

// TestMultiRollbackDelGoesOn: a failed ADD whose rollback DEL fails part way
// (a plugin after the bridge fails its DEL) still runs the DEL of every
// other plugin and delegate: no veth, no reservation is left; the error
// names the ADD's failure and the DEL's; the record stays for the
// runtime's DEL, which fails the same way and leaves nothing either.
func TestMultiRollbackDelGoesOn(t *testing.T) {
	n := delegatetest.NewNode(t)
	conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")),
		muList("netb", "1.1.0", muBridge("mu-b", "2"), `{"type":"cnibox-test-fail","failDel":true}`, `{"type":"cnibox-test-fail","failAdd":true}`))
	m := n.NewPod("m")
	_, _, err := n.Call(multi.Role, "ADD", m, conf)
	if err == nil || cniplug.CodeOf(err) != 5 || !strings.Contains(err.Error(), "ADD fails as asked") || !strings.Contains(err.Error(), "DEL fails as asked") {
		t.Fatalf("ADD = %v (code %d), want code 5 naming the ADD's and the rollback's failures", err, cniplug.CodeOf(err))
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left after the rollback: %v (every other plugin's DEL must run)", got)
	}
	for _, net := range []string{"neta", "netb"} {
		if got := n.Reservations(net); len(got) != 0 {
			t.Errorf("%s reservations left after the rollback: %v", net, got)
		}
	}
	if got := n.Records("multinet"); len(got) != 1 {
		t.Errorf("records %+v, want the record kept for the runtime's DEL", got)
	}
}

// TestMultiDelGoesOn: a delegate whose DEL fails does not stop the others;
// the error names it, and the record stays for the next DEL.
func TestMultiDelGoesOn(t *testing.T) {
	n := delegatetest.NewNode(t)
	conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")),
		muList("netb", "1.1.0", muBridge("mu-b", "2"), `{"type":"cnibox-test-fail","failDel":true}`))
	m := n.NewPod("m")
	n.Add(multi.Role, m, conf)
	for range 2 {
		_, _, err := n.Call(multi.Role, "DEL", m, conf)
		if err == nil || cniplug.CodeOf(err) != 5 || !strings.Contains(err.Error(), `delegates[1] "netb"`) || !strings.Contains(err.Error(), "DEL fails as asked") {
			t.Fatalf("DEL = %v (code %d), want code 5 naming delegates[1] \"netb\"", err, cniplug.CodeOf(err))
		}
	}
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v (the other delegates must be deleted)", got)
	}
	for _, net := range []string{"neta", "netb"} {
		if got := n.Reservations(net); len(got) != 0 {
			t.Errorf("%s reservations left: %v", net, got)
		}
	}
	if got := n.Records("multinet"); len(got) != 1 {
		t.Errorf("records %+v, want the record kept for the next DEL", got)
	}
}

// TestMultiDelWithoutRecord: DEL falls back to the config (and the runtime's
// prevResult) when the record is gone.
func TestMultiDelWithoutRecord(t *testing.T) {
	n := delegatetest.NewNode(t)
	conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")), muList("netb", "1.1.0", muBridge("mu-b", "2")))
	m := n.NewPod("m")
	res := n.Add(multi.Role, m, conf)
	n.DeleteRecord("multinet", m)
	n.Must(multi.Role, "DEL", m, delegatetest.WithPrev(t, conf, res))
	n.Must(multi.Role, "DEL", m, conf)
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
	for _, net := range []string{"neta", "netb"} {
		if got := n.Reservations(net); len(got) != 0 {
			t.Errorf("%s reservations left: %v", net, got)
		}
	}
}

// TestMultiGC: GC deletes the attachments not in the valid list (with every
// delegate's interfaces) and keeps the listed one.
func TestMultiGC(t *testing.T) {
	n := delegatetest.NewNode(t)
	conf := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")), muList("netb", "1.1.0", muBridge("mu-b", "2")))
	keep, drop := n.NewPod("keep"), n.NewPod("drop")
	res := n.Add(multi.Role, keep, conf)
	n.Add(multi.Role, drop, conf)
	if got := delegatetest.Veths(t); len(got) != 4 {
		t.Fatalf("veths after two ADDs: %v, want 4", got)
	}
	n.Must(multi.Role, "GC", delegatetest.Pod{}, delegatetest.WithKeep(t, conf, keep))
	if got := delegatetest.Veths(t); len(got) != 2 {
		t.Errorf("veths after GC: %v, want the kept pod's 2", got)
	}
	for _, net := range []string{"neta", "netb"} {
		got := n.Reservations(net)
		if len(got[keep.ID]) != 1 || len(got[drop.ID]) != 0 {
			t.Errorf("%s reservations after GC: %v, want the kept pod's only", net, got)
		}
	}
	n.CheckKept(multi.Role, "multinet", keep, conf, res)
}

// TestMultiStatus: STATUS goes to every delegate; a not-ready one fails it
// with its code, named.
func TestMultiStatus(t *testing.T) {
	n := delegatetest.NewNode(t)
	ok := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")), muList("netb", "1.1.0", muBridge("mu-b", "2")))
	n.Must(multi.Role, "STATUS", delegatetest.Pod{}, ok)
	bad := muConf("1.1.0", muList("neta", "1.1.0", muBridge("mu-a", "1")),
		muList("netb", "1.1.0", muBridge("mu-b", "2"), `{"type":"cnibox-test-fail","failStatus":true}`))
	_, _, err := n.Call(multi.Role, "STATUS", delegatetest.Pod{}, bad)
	if cniplug.CodeOf(err) != 50 || !strings.Contains(err.Error(), `delegates[1] "netb"`) {
		t.Errorf("STATUS = %v (code %d), want code 50 naming delegates[1] \"netb\"", err, cniplug.CodeOf(err))
	}
}

// TestMultiFilesAndFlannel: delegates given as file paths, an own ifname,
// and flannel as the primary network (a meta role inside a meta role).
func TestMultiFilesAndFlannel(t *testing.T) {
	n, _ := delegatetest.FlannelNode(t, "10.244.20.1/24")
	dir := t.TempDir()
	flannelFile := filepath.Join(dir, "10-flannel.conflist")
	dataFile := filepath.Join(dir, "20-data.conf")
	os.WriteFile(flannelFile, []byte(`{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel","delegate":{"bridge":"mu-fl"}}]}`), 0o644)
	os.WriteFile(dataFile, []byte(`{"name":"data","cniVersion":"1.0.0","ifname":"data0",`+strings.TrimPrefix(muBridge("mu-d", "3"), "{")), 0o644)
	conf := muConf("1.0.0", `"`+flannelFile+`"`, `"`+dataFile+`"`)
	m := n.NewPod("m")
	res := n.Add(multi.Role, m, conf)
	if ip := delegatetest.IP(t, res, "eth0"); !netip.MustParsePrefix("10.244.20.0/24").Contains(ip) {
		t.Errorf("primary address %s, want flannel's node subnet 10.244.20.0/24", ip)
	}
	if !hasLink(t, m.Netns, "data0") || hasLink(t, m.Netns, "net1") {
		t.Errorf("pod links %v, want eth0 and data0", slices.Collect(func(yield func(string) bool) {
			for k := range delegatetest.Links(t, m.Netns) {
				if !yield(k) {
					return
				}
			}
		}))
	}
	if recs := n.Records("cbr0"); len(recs) != 1 || recs[0].Plugin != "flannel" {
		t.Errorf("flannel records %+v, want flannel's own record of the primary", recs)
	}
	// DEL works from the record even when the files are gone.
	os.Remove(flannelFile)
	os.Remove(dataFile)
	n.Must(multi.Role, "DEL", m, conf)
	n.Must(multi.Role, "DEL", m, conf)
	if got := delegatetest.Veths(t); len(got) != 0 {
		t.Errorf("veths left: %v", got)
	}
	for _, net := range []string{"cbr0", "data"} {
		if got := n.Reservations(net); len(got) != 0 {
			t.Errorf("%s reservations left: %v", net, got)
		}
	}
	if got := n.Records(""); len(got) != 0 {
		t.Errorf("records left: %+v", got)
	}
}

// TestMultiConfigErrors: bad delegate lists are refused before anything is
// set up, with the code and the field named.
func TestMultiConfigErrors(t *testing.T) {
	dir := t.TempDir()
	badJSON := filepath.Join(dir, "bad.conflist")
	os.WriteFile(badJSON, []byte("{not json"), 0o644)
	netA := muList("neta", "1.1.0", muBridge("mu-a", "1"))
	tests := []struct {
		name      string
		delegates []string
		code      uint
		field     string
	}{
		{"empty", nil, 7, `"delegates"`},
		{"relative path", []string{`"net.d/x.conflist"`}, 7, `"delegates[0]"`},
		{"missing file", []string{netA, `"` + filepath.Join(dir, "nope.conflist") + `"`}, 7, "nope.conflist does not exist"},
		{"file not JSON", []string{netA, `"` + badJSON + `"`}, 6, "bad.conflist"},
		{"number", []string{netA, `42`}, 7, `"delegates[1]"`},
		{"bad name", []string{`{"name":"a b","type":"bridge"}`}, 7, `"delegates[0].name"`},
		{"no type", []string{`{"name":"x"}`}, 7, "missing 'type'"},
		{"duplicate ifname", []string{netA, muList("b", "1.1.0", muBridge("mu-b", "2")), `{"name":"c","ifname":"net1","type":"bridge"}`}, 7, `"delegates[2].ifname"`},
		{"bad ifname", []string{netA, `{"name":"c","ifname":"a/b","type":"bridge"}`}, 7, `"delegates[1].ifname"`},
		{"multi in multi", []string{netA, `{"name":"c","type":"multi","delegates":[]}`}, 7, `"delegates[1].plugins[0].type"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := delegatetest.NewNode(t)
			m := delegatetest.Pod{ID: "cfg", Netns: "/run/netns/does-not-matter"}
			_, _, err := n.Call(multi.Role, "ADD", m, muConf("1.1.0", tt.delegates...))
			if err == nil || cniplug.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("ADD = %v (code %d), want code %d naming %s", err, cniplug.CodeOf(err), tt.code, tt.field)
			}
			if got := n.Records("multinet"); len(got) != 0 {
				t.Errorf("records after a refused config: %+v", got)
			}
		})
	}
}

// TestMultiRuntimeConfig: the runtime's capability arguments go to the
// primary's plugins that declare them, not to the other networks.
func TestMultiRuntimeConfig(t *testing.T) {
	n := delegatetest.NewNode(t)
	primary := muList("neta", "1.1.0", `{"type":"bridge","bridge":"mu-a","capabilities":{"ips":true},"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.1.0/24"}]]}}`)
	second := muList("netb", "1.1.0", `{"type":"bridge","bridge":"mu-b","capabilities":{"ips":true},"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.2.0/24"}]]}}`)
	var m map[string]any
	json.Unmarshal([]byte(muConf("1.1.0", primary, second)), &m)
	m["runtimeConfig"] = map[string]any{"ips": []string{"10.77.1.42/24"}}
	b, _ := json.Marshal(m)
	conf := string(b)
	p := n.NewPod("m")
	res := n.Add(multi.Role, p, conf)
	if ip := delegatetest.IP(t, res, "eth0"); ip != netip.MustParseAddr("10.77.1.42") {
		t.Errorf("primary address %s, want the requested 10.77.1.42", ip)
	}
	if ip := podAddr(t, p.Netns, "net1"); ip == netip.MustParseAddr("10.77.2.42") || !netip.MustParsePrefix("10.77.2.0/24").Contains(ip) {
		t.Errorf("net1 address %s: want any of netb, not a copy of the primary's request", ip)
	}
	n.Must(multi.Role, "DEL", p, conf)
	n.Must(multi.Role, "DEL", p, conf)
}

// TestMultiChainOlderVersion: in a delegate conflist of an older cniVersion
// (0.3.1, as flannel's and kube-flannel's), the plugin after the first reads
// the first one's result as its prevResult of that version, as it does when
// libcni runs the list; the multi result is the primary's.
func TestMultiChainOlderVersion(t *testing.T) {
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0"} {
		t.Run(v, func(t *testing.T) {
			n := delegatetest.NewNode(t)
			conf := muConf("1.1.0", muList("chained", v, muBridge("mu-c", "3"), `{"type":"cnibox-test-fail"}`))
			m := n.NewPod("m")
			res := n.Add(multi.Role, m, conf)
			if ip := delegatetest.IP(t, res, "eth0"); !netip.MustParsePrefix("10.77.3.0/24").Contains(ip) {
				t.Errorf("result address %s, want one of 10.77.3.0/24", ip)
			}
			n.Must(multi.Role, "DEL", m, conf)
		})
	}
}
