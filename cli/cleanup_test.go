package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// TestCleanup: cleanup kube-proxy and cleanup services in the node's
// namespace (the test's private one): --dry-run names what is there and
// leaves it, the command removes it and says what, a second run says
// there is nothing (exit 0), --json has the list; doctor's two-proxies
// failure goes once kube-proxy's table is removed. Removing the only
// proxy's rules is refused unless --force.
func TestCleanup(t *testing.T) {
	nstest.RequireRoot(t)
	if !nstest.InPrivateNetns() {
		t.Skip("not in the private namespace: would write the machine's nftables")
	}
	host, err := netops.Open("")
	must(t, err)
	defer host.Close()
	try := func(action func(*ucli.Context, *netops.Handle) error, args ...string) (string, error) {
		t.Helper()
		fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
		fs.Bool("dry-run", false, "")
		fs.Bool("force", false, "")
		must(t, jsonFlag.Apply(fs))
		must(t, fs.Parse(args))
		app := ucli.NewApp()
		var b bytes.Buffer
		app.Writer = &b
		err := action(ucli.NewContext(app, fs, nil), host)
		return b.String(), err
	}
	run := func(action func(*ucli.Context, *netops.Handle) error, args ...string) string {
		t.Helper()
		out, err := try(action, args...)
		must(t, err)
		return out
	}
	c, err := nftables.New()
	must(t, err)
	addKubeProxy := func() {
		c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "kube-proxy"})
		must(t, c.Flush())
	}

	// Without cnibox's table, kube-proxy's rules are all the node has:
	// refused, unless --force.
	addKubeProxy()
	if _, err := try(cleanupKubeProxy); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("cleanup kube-proxy without cnibox's table: %v; want a refusal naming --force", err)
	}
	if kp, _ := host.NFT().KubeProxyTables(); len(kp) != 1 {
		t.Errorf("after the refusal kube-proxy's tables are %v, want still there", kp)
	}
	if out := run(cleanupKubeProxy, "--force"); out != "removed table ip kube-proxy\n" {
		t.Errorf("cleanup kube-proxy --force: %q", out)
	}

	snap := &svcmodel.Snapshot{Ports: []svcmodel.ServicePort{{Name: svcmodel.PortName{Namespace: "shop", Name: "web"}, Family: svcmodel.IPv4, Protocol: svcmodel.TCP,
		Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Family: svcmodel.IPv4, Port: 80}}}}}
	must(t, nft.NewServices(host.NFT(), nft.ServicesOptions{}).Apply(snap))
	addKubeProxy()
	d := &doctor{}
	d.checkServices(host)
	if len(d.results) != 1 || d.results[0].Status != statusFail {
		t.Fatalf("doctor with both proxies: %+v, want a failure", d.results)
	}
	for _, want := range []string{"cnibox cleanup kube-proxy", "docs/deploy.md", "--service-proxy=false", "cnibox cleanup services"} {
		if !strings.Contains(d.results[0].Fix, want) {
			t.Errorf("doctor's fix %q does not say %q", d.results[0].Fix, want)
		}
	}

	if out := run(cleanupKubeProxy, "--dry-run"); out != "would remove table ip kube-proxy\n" {
		t.Errorf("cleanup kube-proxy --dry-run: %q", out)
	}
	if kp, _ := host.NFT().KubeProxyTables(); len(kp) != 1 {
		t.Errorf("after --dry-run kube-proxy's tables are %v, want still there", kp)
	}
	if out := run(cleanupKubeProxy); out != "removed table ip kube-proxy\n" {
		t.Errorf("cleanup kube-proxy: %q", out)
	}
	if kp, _ := host.NFT().KubeProxyTables(); len(kp) != 0 {
		t.Errorf("after cleanup kube-proxy's tables are %v, want none", kp)
	}
	d = &doctor{}
	d.checkServices(host)
	if len(d.results) != 1 || d.results[0].Status != statusPass {
		t.Errorf("doctor after the cleanup: %+v, want services passing", d.results)
	}
	if out := run(cleanupKubeProxy); out != "nothing of kube-proxy's on this node\n" {
		t.Errorf("cleanup kube-proxy again: %q", out)
	}

	if out := run(cleanupServices, "--dry-run"); !strings.HasPrefix(out, "would remove table inet "+nft.ServicesTable+" (1 frontends, in 16 shard tables "+nft.ServicesShardPrefix+"*)") {
		t.Errorf("cleanup services --dry-run: %q", out)
	}
	// without kube-proxy's tables: refused, unless --force
	if _, err := try(cleanupServices); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("cleanup services without kube-proxy's tables: %v; want a refusal naming --force", err)
	}
	var r cleanupReport
	must(t, json.Unmarshal([]byte(run(cleanupServices, "--json", "--force")), &r))
	if r.What != "services" || r.DryRun || len(r.Removed) != 1 {
		t.Errorf("cleanup services --json: %+v", r)
	}
	if _, ok, _ := host.NFT().ServicesFrontendCount(); ok {
		t.Error("after cleanup services the table is still there")
	}
	if out := run(cleanupServices); !strings.HasPrefix(out, "no services table on this node") {
		t.Errorf("cleanup services again: %q", out)
	}
}
