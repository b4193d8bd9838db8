package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestInspectServices: without the services table inspect services says
// so and exits 0, and doctor says nothing of Services; with one (written
// from a snapshot in the node's namespace, the test's private one) each
// frontend is a line with its endpoints, or reject, its affinity and
// masquerade, and --json has them for scripts; doctor passes with the
// count, and fails naming both when kube-proxy's tables (nftables mode,
// or iptables-nft's KUBE-SERVICES) are there too.
func TestInspectServices(t *testing.T) {
	nstest.RequireRoot(t)
	if !nstest.InPrivateNetns() {
		t.Skip("not in the private namespace: would write the machine's nftables")
	}
	host, err := netops.Open("")
	must(t, err)
	defer host.Close()

	run := func(args ...string) (string, error) {
		fs := flag.NewFlagSet("services", flag.ContinueOnError)
		must(t, jsonFlag.Apply(fs))
		must(t, fs.Parse(args))
		app := ucli.NewApp()
		var b bytes.Buffer
		app.Writer = &b
		err := inspectServices(ucli.NewContext(app, fs, nil), host)
		return b.String(), err
	}
	doctorServices := func() []checkResult {
		d := &doctor{}
		d.checkServices(host)
		return d.results
	}
	out, err := run()
	if err != nil || !strings.Contains(out, "no services table on this node") {
		t.Errorf("without the table: %v\n%s", err, out)
	}
	if r := doctorServices(); len(r) != 0 {
		t.Errorf("doctor without any proxy: %+v, want nothing", r)
	}

	v4 := svcmodel.IPv4
	ep := func(a string, p uint16) svcmodel.Endpoint {
		return svcmodel.Endpoint{Addr: netip.MustParseAddr(a), Port: p, Ready: true, Serving: true}
	}
	snap := &svcmodel.Snapshot{
		NodePortAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.77.0.0/16")},
		Ports: []svcmodel.ServicePort{
			{Name: svcmodel.PortName{Namespace: "shop", Name: "web", Port: "http"}, Family: v4, Protocol: svcmodel.TCP,
				Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Family: v4, Port: 80},
					{Kind: svcmodel.NodePort, Family: v4, Port: 30080}},
				ClusterEndpoints: []svcmodel.Endpoint{ep("10.77.1.2", 8080), ep("10.77.2.2", 8080)}, HasEndpoints: true,
				AffinityTimeout: 10 * time.Minute},
			{Name: svcmodel.PortName{Namespace: "shop", Name: "gone"}, Family: v4, Protocol: svcmodel.UDP,
				Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: netip.MustParseAddr("10.96.0.11"), Family: v4, Port: 53}}},
		},
	}
	s := nft.NewServices(host.NFT(), nft.ServicesOptions{})
	must(t, s.Apply(snap))
	defer s.Delete()

	out, err = run()
	must(t, err)
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			lines[f[3]] = l
		}
	}
	for front, want := range map[string][]string{
		"10.96.0.10:80":    {"shop/web:http", "ClusterIP", "TCP", "10.77.1.2:8080,10.77.2.2:8080", "ClientIP 10m0s", "from outside the cluster"},
		"nodeports4:30080": {"shop/web:http", "NodePort", "10.77.1.2:8080,10.77.2.2:8080", "all"},
		"10.96.0.11:53":    {"shop/gone:", "UDP", "none: reject"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[front], w) {
				t.Errorf("inspect services: the line of %s lacks %q:\n%s", front, w, out)
			}
		}
	}
	if !strings.Contains(out, "nodeports4: 192.0.2.10") {
		t.Errorf("inspect services does not name the NodePort addresses:\n%s", out)
	}
	out, err = run("--json")
	must(t, err)
	var r servicesReport
	must(t, json.Unmarshal([]byte(out), &r))
	if !r.Table || len(r.Frontends) != 3 || len(r.NodePortAddrs) != 1 {
		t.Errorf("inspect services --json: %+v", r)
	}
	for _, fe := range r.Frontends {
		if fe.Kind == "ClusterIP" && fe.Port == 80 && (len(fe.Endpoints) != 2 || fe.AffinitySeconds != 600) {
			t.Errorf("inspect services --json, the ClusterIP: %+v", fe)
		}
	}

	res := doctorServices()
	if len(res) != 1 || res[0].Status != statusPass || !strings.Contains(res[0].Detail, "serves 3 frontends") {
		t.Errorf("doctor with the services table alone: %+v", res)
	}
	// kube-proxy beside it: its nftables mode's table, or its iptables
	// mode's chain as iptables-nft writes it.
	c, err := nftables.New()
	must(t, err)
	for _, add := range []func() *nftables.Table{
		func() *nftables.Table {
			return c.AddTable(&nftables.Table{Name: "kube-proxy", Family: nftables.TableFamilyIPv6})
		},
		func() *nftables.Table {
			tb := c.AddTable(&nftables.Table{Name: "nat", Family: nftables.TableFamilyIPv4})
			c.AddChain(&nftables.Chain{Name: "KUBE-SERVICES", Table: tb})
			return tb
		},
	} {
		tb := add()
		must(t, c.Flush())
		res := doctorServices()
		if len(res) != 1 || res[0].Status != statusFail || !strings.Contains(res[0].Detail, "two Service proxies") ||
			!strings.Contains(res[0].Fix, "kube-proxy --cleanup") || !strings.Contains(res[0].Fix, "--service-proxy=false") {
			t.Errorf("doctor with kube-proxy's %s too: %+v", tb.Name, res)
		}
		c.DelTable(tb)
		must(t, c.Flush())
	}
	must(t, s.Delete())
	if res := doctorServices(); len(res) != 0 {
		t.Errorf("doctor after the table's removal: %+v", res)
	}
}
