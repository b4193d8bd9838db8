package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/nstest"
)

// lanHost is a host outside the node: a namespace joined to the node by a
// veth, at 198.51.100.2/24 (the node's side 198.51.100.1), serving HTTP on
// :8080. The node routes between it and its bridges (the forward path).
type lanHost struct {
	netns string
	addr  netip.Addr
	node  netip.Addr
}

func newLANHost(t *testing.T) *lanHost {
	t.Helper()
	ipBin := nstest.RequireProgram(t, "ip", "iproute2")
	ns := nstest.NewNS(t, "lan")
	name := filepath.Base(ns)
	l := &lanHost{netns: ns, addr: netip.MustParseAddr("198.51.100.2"), node: netip.MustParseAddr("198.51.100.1")}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	run("link", "add", "lanveth0", "type", "veth", "peer", "name", "lan0", "netns", name)
	t.Cleanup(func() { exec.Command(ipBin, "link", "del", "lanveth0").Run() })
	run("addr", "add", l.node.String()+"/24", "dev", "lanveth0")
	run("link", "set", "lanveth0", "up")
	run("-n", name, "addr", "add", l.addr.String()+"/24", "dev", "lan0")
	run("-n", name, "link", "set", "lan0", "up")
	// The test's node namespace: forwarding on, for the LAN's traffic.
	must(t, os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644))

	var ln net.Listener
	if err := nstest.Run(t, ns, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(l.addr.String(), "8080"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the lan\n") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l
}

// get fetches url from the LAN host's namespace.
func (l *lanHost) get(t *testing.T, url string) (string, error) {
	var body string
	err := nstest.Run(t, l.netns, func() error {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	return body, err
}

// eventually retries f (a fetch) until its output holds want, up to a
// generous deadline, and returns the last output and error.
func eventually(want string, f func() (string, error)) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := f()
		if (err == nil && strings.Contains(out, want)) || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// podmanNetPlugins returns the plugin types of a conflist podman wrote and
// its bridge's name.
func podmanNetPlugins(t *testing.T, path string) (types []string, bridge string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("podman's conflist: %v", err)
	}
	var l struct {
		Plugins []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("podman's conflist %s: %v\n%s", path, err, b)
	}
	for _, p := range l.Plugins {
		types = append(types, p.Type)
		if p.Type == "bridge" {
			bridge = p.Bridge
		}
	}
	return types, bridge
}

// TestPodmanFirewall: podman 4.3 (CNI backend) with a plugin dir holding
// only cnibox writes its own network's conflist (bridge, portmap,
// firewall, tuning), and with iptables-nft's FORWARD policy DROP in the
// node's namespace (as Docker leaves it) two containers on it reach each
// other, a container reaches a host outside the node through the node's
// forward path, and that host reaches a container's -p port. After podman
// rm nothing of the containers stays: no nftables rule with their
// addresses, no route to them, no store record, no veth.
func TestPodmanFirewall(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	e := newEnv(t)
	dropFirewallTables(t)
	lan := newLANHost(t)
	iptablesBin := nstest.RequireProgram(t, "iptables-nft", "iptables")
	if out, err := exec.Command(iptablesBin, "-P", "FORWARD", "DROP").CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft -P FORWARD DROP: %v\n%s", err, out)
	}
	confDir := t.TempDir()
	p := newPodman(t, e.binDir, confDir)
	p.importBusybox("localhost/cnibox-busybox")

	const subnet = "10.89.51.0/24"
	p.mustRun("network", "create", "--subnet", subnet, "fwnet")
	types, br := podmanNetPlugins(t, filepath.Join(confDir, "fwnet.conflist"))
	t.Cleanup(func() {
		p.run("network", "rm", "-f", "fwnet")
		if br != "" {
			hostHandle(t).DeleteLink(br)
		}
	})
	if got, want := strings.Join(types, ","), "bridge,portmap,firewall,tuning"; got != want {
		t.Fatalf("podman's conflist has plugins %s, want %s", got, want)
	}

	p.mustRun("run", "-d", "--name", "web", "--network", "fwnet", "-p", "18081:80", "localhost/cnibox-busybox", "httpd", "-f", "-p", "80", "-h", "/www")
	ip := p.mustRun("inspect", "-f", "{{.NetworkSettings.Networks.fwnet.IPAddress}}", "web")
	webIP, err := netip.ParseAddr(ip)
	if err != nil || !netip.MustParsePrefix(subnet).Contains(webIP) {
		t.Fatalf("web's address %q: want one in %s", ip, subnet)
	}
	wget := func(url string) func() (string, error) {
		return func() (string, error) {
			return p.run("run", "--rm", "--network", "fwnet", "localhost/cnibox-busybox", "timeout", "5", "wget", "-q", "-O", "-", url)
		}
	}
	if out, err := eventually("hello from cnibox", wget("http://"+ip+"/")); !strings.Contains(out, "hello from cnibox") {
		t.Errorf("a second container could not fetch from web at %s: %v\n%s", ip, err, out)
	}
	lanURL := fmt.Sprintf("http://%s:8080/", lan.addr)
	if out, err := eventually("hello from the lan", wget(lanURL)); !strings.Contains(out, "hello from the lan") {
		t.Errorf("a container could not fetch from the LAN host %s under FORWARD DROP: %v\n%s", lanURL, err, out)
	}
	portURL := fmt.Sprintf("http://%s:18081/", lan.node)
	if out, err := eventually("hello from cnibox", func() (string, error) { return lan.get(t, portURL) }); !strings.Contains(out, "hello from cnibox") {
		t.Errorf("the LAN host could not fetch web's -p port at %s under FORWARD DROP: %v\n%s", portURL, err, out)
	}
	if rules := nftRuleset(t); !strings.Contains(rules, ip+" ") {
		t.Fatalf("no nftables rule names web's %s while it runs (the leak check below would prove nothing):\n%s", ip, rules)
	}

	p.mustRun("rm", "-f", "-t", "0", "web")
	if left := podAddrsIn(nftRuleset(t)); len(left) != 0 {
		t.Errorf("nftables rules with containers' addresses %v stay after podman rm:\n%s", left, nftRuleset(t))
	}
	routes, err := exec.Command(nstest.RequireProgram(t, "ip", "iproute2"), "-4", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v\n%s", err, routes)
	}
	if left := podAddrsIn(string(routes)); len(left) != 0 {
		t.Errorf("routes to containers' addresses %v stay after podman rm:\n%s", left, routes)
	}
	if got := e.reservations("fwnet"); len(got) != 0 {
		t.Errorf("store reservations after podman rm: %v", got)
	}
	if got := ourVeths(t); len(got) != 0 {
		t.Errorf("veths after podman rm: %v", got)
	}
}

// nftRuleset lists the node namespace's nftables ruleset.
func nftRuleset(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(nstest.RequireProgram(t, "nft", "nftables"), "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	return string(out)
}

// podAddrsIn returns the container addresses of fwnet (10.89.51.0/24 but
// its network, gateway and broadcast addresses, which are the bridge's)
// that text names.
func podAddrsIn(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`10\.89\.51\.(\d+)\b`).FindAllStringSubmatch(text, -1) {
		if m[1] != "0" && m[1] != "1" && m[1] != "255" {
			out = append(out, m[0])
		}
	}
	return out
}
