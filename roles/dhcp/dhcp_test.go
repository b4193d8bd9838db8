package dhcp_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/dhcp"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/macvlan"
	"github.com/cnibox/cnibox/store"
)

// leasesInStore returns the daemon's leases from its store.
func leasesInStore(t *testing.T, dir string) []lease.Lease {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ls, err := lease.Records.In(st).List("")
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestLeases: macvlan pods get leases from dnsmasq with the router, DNS and
// option 121 routes (installed in the pod); CHECK passes; DEL releases at
// the server, twice is fine, and works with the namespace gone; STATUS
// answers until the daemon is gone, then says 50.
func TestLeases(t *testing.T) {
	n := newNode(t)
	l := newLAN(t)
	d := startDaemon(t, t.TempDir())
	c := conf("1.1.0", d.socket, "")
	p1, p2 := n.NewPod("a"), roletest.Pod{ID: "b", Netns: ownNS(t, "dhcpgone")}
	n.Must(macvlan.Role, "STATUS", roletest.Pod{}, c)
	r1 := roletest.Result(t, n.Must(macvlan.Role, "ADD", p1, c), "1.1.0")
	r2 := roletest.Result(t, n.Must(macvlan.Role, "ADD", p2, c), "1.1.0")
	var ips []string
	for i, r := range [][]byte{mustJSON(t, r1), mustJSON(t, r2)} {
		s := string(r)
		for _, want := range []string{`"gateway":"10.56.0.1"`, `"nameservers":["10.56.0.53"]`, `"domain":"lan.test"`,
			`{"dst":"192.168.56.0/24","gw":"10.56.0.254"}`, `{"dst":"0.0.0.0/0","gw":"10.56.0.1"}`} {
			if !strings.Contains(s, want) {
				t.Errorf("pod %d: result %s lacks %s", i, s, want)
			}
		}
	}
	for _, r := range []string{r1.IPs[0].Address.String(), r2.IPs[0].Address.String()} {
		p := netip.MustParsePrefix(r)
		if p.Bits() != 24 || !netip.MustParsePrefix("10.56.0.0/24").Contains(p.Addr()) {
			t.Errorf("address %s, want one of 10.56.0.0/24 with /24", p)
		}
		ips = append(ips, p.Addr().String())
	}
	if ips[0] == ips[1] {
		t.Fatalf("both pods got %s", ips[0])
	}
	l.waitLeases("lists both pods", func(m map[string]string) bool { return m[ips[0]] != "" && m[ips[1]] != "" })
	if line := l.leases()[ips[0]]; !strings.Contains(line, " "+p1.ID+" ") {
		t.Errorf("lease %q lacks the hostname %s (K8S_POD_NAME)", line, p1.ID)
	}
	routes := roletest.InNS(t, p1.Netns, func(h *netops.Handle) ([]netops.Route, error) { return h.Routes("eth0") })
	var got []string
	for _, r := range routes {
		got = append(got, r.String())
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "192.168.56.0/24 via 10.56.0.254") }) {
		t.Errorf("pod routes %q lack option 121's 192.168.56.0/24 via 10.56.0.254", got)
	}
	n.Must(macvlan.Role, "CHECK", p1, roletest.WithPrev(t, c, mustJSON(t, r1)))
	ls := leasesInStore(t, d.data)
	if len(ls) != 2 || ls[0].Server != lanRouter || ls[0].State != lease.Bound {
		t.Fatalf("store leases %+v, want 2 bound from %s", ls, lanRouter)
	}

	n.Must(macvlan.Role, "DEL", p1, c)
	n.Must(macvlan.Role, "DEL", p1, c)
	l.waitLeases("pod a's lease released", func(m map[string]string) bool { return m[ips[0]] == "" && m[ips[1]] != "" })

	// The pod's namespace gone (the macvlan with it, as far as the
	// runtime sees): DEL still releases.
	if err := netops.DeleteNamedNS(strings.TrimPrefix(p2.Netns, "/run/netns/")); err != nil {
		t.Fatal(err)
	}
	n.Must(macvlan.Role, "DEL", p2, c)
	n.Must(macvlan.Role, "DEL", p2, c)
	l.waitLeases("empty", func(m map[string]string) bool { return len(m) == 0 })
	if ls := leasesInStore(t, d.data); len(ls) != 0 {
		t.Errorf("store still lists %+v", ls)
	}

	d.kill()
	_, err := n.Call(macvlan.Role, "STATUS", roletest.Pod{}, c)
	if got := roletest.Code(err); got != cniplug.CodeNotReady {
		t.Errorf("STATUS without the daemon: %v (code %d), want 50", err, got)
	}
}

// ownNS creates a namespace the test may delete itself.
func ownNS(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6)
	path, err := netops.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netops.DeleteNamedNS(name) })
	nstest.SetBaseSysctls(t, path)
	return path
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServerGone: without a DHCP server, ADD fails with code 11 within the
// daemon's timeout and leaves no interface and no lease behind.
func TestServerGone(t *testing.T) {
	n := newNode(t)
	l := newLAN(t)
	l.stop()
	d := startDaemon(t, t.TempDir(), "-timeout", "3s")
	c := conf("1.1.0", d.socket, "")
	p := n.NewPod("gone")
	_, err := n.Call(macvlan.Role, "ADD", p, c)
	if got := roletest.Code(err); got != types.ErrTryAgainLater {
		t.Fatalf("ADD without a server: %v (code %d), want 11", err, got)
	}
	if !strings.Contains(err.Error(), "no DHCP lease for eth0") {
		t.Errorf("message %q does not say what failed", err)
	}
	links := roletest.InNS(t, p.Netns, func(h *netops.Handle) ([]netops.Link, error) { return h.Links() })
	for _, lk := range links {
		if lk.Name == "eth0" {
			t.Errorf("ADD left eth0 in the pod")
		}
	}
	if ls := leasesInStore(t, d.data); len(ls) != 0 {
		t.Errorf("store lists %+v", ls)
	}
	n.Must(macvlan.Role, "DEL", p, c)
}

// TestConfig: the fields' errors name the field.
func TestConfig(t *testing.T) {
	nstest.RequireRoot(t)
	n := roletest.NewNode(t, dhcp.Role)
	for _, tt := range []struct{ ipam, word string }{
		{`"daemonSocketPath":"rel/sock"`, "ipam.daemonSocketPath"},
		{`"request":[{"option":"nonsense"}]`, "ipam.request[0].option"},
		{`"provide":[{"option":"host-name"}]`, "ipam.provide[0].value"},
		{`"priority":-1`, "ipam.priority"},
	} {
		c := []byte(`{"cniVersion":"1.1.0","name":"x","type":"dhcp","ipam":{"type":"dhcp",` + tt.ipam + `}}`)
		_, err := n.Call(dhcp.Role, "ADD", roletest.Pod{ID: "c", Netns: "/proc/self/ns/net"}, c)
		if roletest.Code(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tt.word) {
			t.Errorf("%s: %v, want code 7 naming %s", tt.ipam, err, tt.word)
		}
	}
}

// TestBridge: a bridge network whose bridge has the node's NIC as a port
// gets its pods' addresses from the LAN's server; DEL releases them.
func TestBridge(t *testing.T) {
	n := roletest.NewNode(t, bridge.Role, dhcp.Role)
	l := newLAN(t)
	host := roletest.Open(t, "")
	if _, err := host.EnsureBridge(netops.BridgeOpts{Name: "dhbr0"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.DeleteLink("dhbr0") })
	if _, err := host.EnsureUplink(netops.UplinkOpts{Uplink: "lan0", Bridge: "dhbr0"}); err != nil {
		t.Fatal(err)
	}
	if err := host.SetLinkUp("dhbr0"); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, t.TempDir())
	c := []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"brnet","type":"bridge","bridge":"dhbr0",
		"ipam":{"type":"dhcp","daemonSocketPath":%q}}`, d.socket))
	p := n.NewPod("br")
	res := roletest.Result(t, n.Must(bridge.Role, "ADD", p, c), "1.1.0")
	ip := res.IPs[0].Address.IP.String()
	if gw := res.IPs[0].Gateway.String(); gw != lanRouter {
		t.Errorf("gateway %s, want %s", gw, lanRouter)
	}
	l.waitLeases("lists the pod", func(m map[string]string) bool { return m[ip] != "" })
	n.Must(bridge.Role, "DEL", p, c)
	n.Must(bridge.Role, "DEL", p, c)
	l.waitLeases("released", func(m map[string]string) bool { return m[ip] == "" })
}
