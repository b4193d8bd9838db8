package cli

import (
	"bytes"
	"flag"
	"net/netip"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/store"
)

// TestInspectPolicy: with a policy table in the node's namespace (the
// test's private one) and the agent's index in the store, `inspect policy
// POD` shows the policies whose subject holds the pod's address, per
// direction, each rule with its counter, and whether it is isolated or
// pending; a pod no policy selects shows none.
func TestInspectPolicy(t *testing.T) {
	nstest.RequireRoot(t)
	if !nstest.InPrivateNetns() {
		t.Skip("not in the private namespace: would write the machine's nftables")
	}
	web, other := netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3")
	host, err := netops.Open("")
	must(t, err)
	defer host.Close()
	h := host.NFT()
	host1 := func(a netip.Addr) policymodel.Elem { return policymodel.AddrElem(a) }
	rules := &policymodel.Rules{Ingress: policymodel.Tiers{Isolated: "subj", NetworkPolicy: []*policymodel.Policy{
		{ID: "np/default/web", Tier: policymodel.TierNetworkPolicy, Subject: "subj", Rules: []policymodel.Rule{
			{ID: "np/default/web/ingress/0", Action: policymodel.Allow, Clauses: []policymodel.Clause{{Peer: "peer"}}}}},
	}}}
	must(t, h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: rules, Sets: []*policymodel.Set{
		policymodel.NewSet("subj", policymodel.Addrs, "", host1(web)), policymodel.NewSet("peer", policymodel.Addrs, "", host1(other))}}))
	defer h.DeletePolicy()
	_, err = h.MarkPolicyPending("default", []netip.Addr{web}) // no guard: not marked
	must(t, err)

	dir := t.TempDir()
	st, err := store.Open(dir)
	must(t, err)
	must(t, st.PutPolicyIndex(store.PolicyIndex{Rules: rules}))
	for _, ep := range []store.Endpoint{
		{Network: "n", ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "web", IPs: []netip.Prefix{netip.PrefixFrom(web, 24)}},
		{Network: "n", ContainerID: "c2", IfName: "eth0", PodNamespace: "default", PodName: "other", IPs: []netip.Prefix{netip.PrefixFrom(other, 24)}},
	} {
		must(t, st.PutEndpoint(ep))
	}
	st.Close()

	run := func(pod string) string {
		fs := flag.NewFlagSet("policy", flag.ContinueOnError)
		must(t, dataDirFlag.Apply(fs))
		must(t, fs.Parse([]string{"--data-dir", dir, pod}))
		app := ucli.NewApp()
		var b bytes.Buffer
		app.Writer = &b
		must(t, inspectPolicy(ucli.NewContext(app, fs, nil), host))
		return b.String()
	}
	out := run("default/web")
	for _, w := range []string{"isolated [ingress]", "pending false", "np/default/web/ingress/0", "allow", "networkpolicy", "cnibox flows --pod default/web"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect policy default/web lacks %q:\n%s", w, out)
		}
	}
	if bare := run("web"); bare != out {
		t.Errorf("inspect policy web (a bare name, as --pod takes it) differs from default/web:\n%s", bare)
	}
	if out := run("default/other"); strings.Contains(out, "np/default/web") {
		t.Errorf("a policy that does not select default/other is shown:\n%s", out)
	}

	// doctor --policy: the rule that allows, the isolation that drops.
	doctor := func(conn string) (string, error) {
		fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
		must(t, dataDirFlag.Apply(fs))
		fs.String("policy", "", "")
		must(t, fs.Parse([]string{"--data-dir", dir, "--policy", conn}))
		app := ucli.NewApp()
		var b bytes.Buffer
		app.Writer = &b
		err := Options{}.doctorOrPolicy(ucli.NewContext(app, fs, nil), host)
		return b.String(), err
	}
	out, err = doctor("10.77.0.3 10.77.0.2 80/tcp")
	if err != nil || !strings.Contains(out, "ingress allowed by np/default/web/ingress/0") || !strings.Contains(out, "cnibox flows --verdict") {
		t.Errorf("doctor --policy other -> web: %v\n%s", err, out)
	}
	out, err = doctor("10.77.0.9 10.77.0.2 80")
	if err == nil || !strings.Contains(out, "dropped") || !strings.Contains(out, "none of their rules allows") {
		t.Errorf("doctor --policy from an unknown address: %v (want exit 1)\n%s", err, out)
	}
	if _, err := doctor("10.77.0.9 80"); err == nil || !strings.Contains(err.Error(), "SRC DST PORT") {
		t.Errorf("a malformed --policy: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPolicyPod: inspect policy's POD is taken as --pod is everywhere:
// NAMESPACE/NAME, or a bare NAME in any namespace; a name in several
// namespaces is an error naming them and the fix, as is one that matches
// nothing. (Before, a bare NAME matched nothing.)
func TestPolicyPod(t *testing.T) {
	a, b, c := netip.MustParsePrefix("10.77.0.2/24"), netip.MustParsePrefix("10.77.0.3/24"), netip.MustParsePrefix("10.77.0.4/24")
	eps := []store.Endpoint{
		{Network: "n", ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "web", IPs: []netip.Prefix{a}},
		{Network: "n", ContainerID: "c2", IfName: "eth0", PodNamespace: "shop", PodName: "db", IPs: []netip.Prefix{b}},
		{Network: "n", ContainerID: "c3", IfName: "eth0", PodNamespace: "dev", PodName: "db", IPs: []netip.Prefix{c}},
	}
	for _, pod := range []string{"web", "default/web"} {
		name, addrs, err := policyPod(eps, pod)
		if err != nil || name != "default/web" || len(addrs) != 1 || addrs[0] != a.Addr() {
			t.Errorf("%s: %q %v %v, want default/web [%v]", pod, name, addrs, err, a.Addr())
		}
	}
	if _, _, err := policyPod(eps, "db"); err == nil || !strings.Contains(err.Error(), "dev/db, shop/db") || !strings.Contains(err.Error(), "give NAMESPACE/NAME") {
		t.Errorf("db in two namespaces: %v, want an error naming both and the fix", err)
	}
	if name, _, err := policyPod(eps, "shop/db"); err != nil || name != "shop/db" {
		t.Errorf("shop/db: %q %v", name, err)
	}
	if _, _, err := policyPod(eps, "cache"); err == nil || !strings.Contains(err.Error(), "NAME in any namespace") {
		t.Errorf("cache: %v, want an error saying how --pod is taken", err)
	}
}
