package macvlan_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
)

// TestMAC: the MAC comes from runtimeConfig.mac, else args.cni.mac, else
// CNI_ARGS MAC=, else the config's "mac".
func TestMAC(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	for _, tc := range []struct {
		name, extra, args, want string
	}{
		{"conf", `,"master":"lan0","mac":"0a:00:00:00:00:01"`, "", "0a:00:00:00:00:01"},
		{"cni args", `,"master":"lan0","mac":"0a:00:00:00:00:01"`, "MAC=0a:00:00:00:00:02", "0a:00:00:00:00:02"},
		{"args.cni", `,"master":"lan0","mac":"0a:00:00:00:00:01","args":{"cni":{"mac":"0a:00:00:00:00:03"}}`, "MAC=0a:00:00:00:00:02", "0a:00:00:00:00:03"},
		{"runtimeConfig", `,"master":"lan0","mac":"0a:00:00:00:00:01","runtimeConfig":{"mac":"0a:00:00:00:00:04"}`, "MAC=0a:00:00:00:00:02", "0a:00:00:00:00:04"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := n.NewPod("mac")
			c := conf("1.0.0", v4, tc.extra)
			args := "IgnoreUnknown=1"
			if tc.args != "" {
				args += ";" + tc.args
			}
			res := roletest.Result(t, n.Must(macvlan.Role, "ADD", p, c, "CNI_ARGS", args), "1.0.0")
			l, err := roletest.Open(t, p.Netns).LinkByName("eth0")
			if err != nil || l.MAC.String() != tc.want || res.Interfaces[0].Mac != tc.want {
				t.Errorf("MAC = %v (result %s), %v; want %s", l.MAC, res.Interfaces[0].Mac, err, tc.want)
			}
			n.Must(macvlan.Role, "DEL", p, c)
		})
	}
}

// TestModes: every mode makes a device in that mode that CHECK accepts.
func TestModes(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	for _, mode := range []string{"bridge", "private", "vepa", "passthru", "source"} {
		t.Run(mode, func(t *testing.T) {
			p := n.NewPod(mode)
			c := conf("1.1.0", v4, `,"master":"lan0","mode":"`+mode+`","mtu":1400,"bcqueuelen":100`)
			out := n.Must(macvlan.Role, "ADD", p, c)
			l, err := roletest.Open(t, p.Netns).SubLinkByName("eth0")
			if err != nil || l.Mode != mode || l.MTU != 1400 {
				t.Errorf("eth0 = %+v, %v; want mode %s, MTU 1400", l, err, mode)
			}
			n.Must(macvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
			n.Must(macvlan.Role, "DEL", p, c)
		})
	}
	n.Empty("mvnet")
}

// TestL2: without IPAM the pod gets an up device and no address.
func TestL2(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("l2")
	c := []byte(`{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"lan0"}`)
	out := n.Must(macvlan.Role, "ADD", p, c)
	res := roletest.Result(t, out, "1.0.0")
	if len(res.IPs) != 0 || len(res.Interfaces) != 1 {
		t.Errorf("result = %+v", res)
	}
	l, err := roletest.Open(t, p.Netns).LinkByName("eth0")
	if err != nil || !l.Up {
		t.Errorf("eth0 = %+v, %v; want up", l, err)
	}
	n.Must(macvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
	for range 2 {
		n.Must(macvlan.Role, "DEL", p, c)
	}
	n.Empty("mvnet")
}

// TestLinkInContainer: with linkInContainer the master is an interface of
// the pod, and the pod reaches the LAN through it.
func TestLinkInContainer(t *testing.T) {
	n := newNode(t)
	lan := newLAN(t)
	p := n.NewPod("lic")
	pod := roletest.Open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "up0", PeerName: "lan1", Peer: roletest.Open(t, lan)}); err != nil {
		t.Fatal(err)
	}
	lh := roletest.Open(t, lan)
	if err := lh.SetLinkUp("lan1"); err != nil {
		t.Fatal(err)
	}
	if err := lh.EnsureAddr("lan1", mustPrefix("10.56.0.1/24"), netops.AddrOpts{}); err != nil {
		t.Fatal(err)
	}
	c := []byte(`{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","master":"up0","linkInContainer":true,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.56.0.0/24","rangeStart":"10.56.0.10"}]]}}`)
	out := n.Must(macvlan.Role, "ADD", p, c)
	if _, err := pod.Ping(mustPrefix("10.56.0.1/32").Addr(), 3*time.Second); err != nil {
		t.Errorf("the pod cannot reach the LAN host through its own master: %v", err)
	}
	n.Must(macvlan.Role, "CHECK", p, roletest.WithPrev(t, c, out))
	for range 2 {
		n.Must(macvlan.Role, "DEL", p, c)
	}
	if _, err := pod.LinkByName("up0"); err != nil {
		t.Errorf("the pod's master is gone: %v", err)
	}
	n.Empty("mvnet")
}

// TestBadInput: bad input gets the CNI code of its kind, a message that
// names the field, and leaves nothing behind.
func TestBadInput(t *testing.T) {
	n := newNode(t)
	newLAN(t)
	p := n.NewPod("bad")
	for _, tc := range []struct {
		name, conf string
		code       uint
		says       string
	}{
		{"mode", string(conf("1.0.0", v4, `,"mode":"l3"`)), 2, `"mode"`},
		{"mtu above master", string(conf("1.0.0", v4, `,"master":"lan0","mtu":9000`)), 7, `"mtu"`},
		{"mtu", string(conf("1.0.0", v4, `,"mtu":-5`)), 7, `"mtu"`},
		{"master missing", string(conf("1.0.0", v4, `,"master":"nic9"`)), 7, `"master"`},
		{"master name", string(conf("1.0.0", v4, `,"master":"a/b"`)), 7, `"master"`},
		{"mac", string(conf("1.0.0", v4, `,"mac":"01:00:5e:00:00:01"`)), 7, `"mac"`},
		{"runtime mac", string(conf("1.0.0", v4, `,"runtimeConfig":{"mac":"zz"}`)), 7, "runtimeConfig.mac"},
		{"bcqueuelen", string(conf("1.0.0", v4, `,"bcqueuelen":-1`)), 7, `"bcqueuelen"`},
		{"json", `{"cniVersion":"1.0.0","name":"mvnet","type":"macvlan","mtu":"x"}`, 6, `config field "mtu"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(macvlan.Role, "ADD", p, []byte(tc.conf))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: code %d, error %v; want code %d naming %s", roletest.Code(err), err, tc.code, tc.says)
			}
		})
	}
	if _, err := n.Call(macvlan.Role, "ADD", p, conf("1.0.0", v4, ""), "CNI_NETNS", "/run/netns/no-such-pod"); roletest.Code(err) != 3 {
		t.Errorf("ADD into a missing netns: %v, want code 3", err)
	}
	host := roletest.Open(t, "")
	if err := host.DeleteRoute(netops.Route{GW: lanHost4, Dev: "lan0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(macvlan.Role, "ADD", p, conf("1.0.0", v4, "")); roletest.Code(err) != 7 || !strings.Contains(err.Error(), "default route") {
		t.Errorf("ADD without master nor default route: %v, want code 7 about the default route", err)
	}
	if _, _, err := roletest.Open(t, p.Netns).EnsureIfb("eth0", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(macvlan.Role, "ADD", p, conf("1.0.0", v4, `,"master":"lan0"`)); roletest.Code(err) != 101 {
		t.Errorf("ADD with eth0 taken: %v, want code 101", err)
	}
	n.Empty("mvnet")
}
