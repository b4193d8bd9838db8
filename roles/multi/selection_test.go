package multi_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/multi"
)

// selectionSetup is a Multus config (clusterNetwork = the primary's
// conflist) with the pod path on, an agent, and NADs of secondaries.
func selectionSetup(t *testing.T, extra string) (string, *podAgent) {
	t.Helper()
	dir := t.TempDir()
	primary := filepath.Join(dir, "10-podnet.conflist")
	os.WriteFile(primary, []byte(primaryList), 0o644)
	g := newPodAgent(t)
	static := `"ipam":{"type":"static"}`
	g.nad("default", "static", `{"cniVersion":"1.0.0","name":"static","type":"bridge","bridge":"mu-s","capabilities":{"ips":true,"mac":true},`+static+`}`)
	g.nad("other", "static", `{"cniVersion":"1.0.0","name":"static","type":"bridge","bridge":"mu-o","capabilities":{"ips":true},`+static+`}`)
	g.nad("default", "plain", `{"cniVersion":"1.0.0","name":"plain","type":"bridge","bridge":"mu-s",`+static+`}`)
	g.nad("default", "chain", `{"cniVersion":"1.0.0","name":"chain","plugins":[{"type":"bridge","bridge":"mu-c","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.21.0/24"}]]}},`+
		`{"type":"bandwidth","capabilities":{"bandwidth":true}},{"type":"portmap","capabilities":{"portMappings":true}},{"type":"tuning","capabilities":{"infinibandGUID":true}}]}`)
	g.nad("kube-system", "altnet", `{"cniVersion":"1.0.0","name":"altnet","type":"bridge","bridge":"mu-alt","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.30.0/24"}]]}}`)
	g.nad("kube-system", "sidenet", `{"cniVersion":"1.0.0","name":"sidenet","type":"bridge","bridge":"mu-side","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.31.0/24"}]]}}`)
	conf := `{"cniVersion":"1.1.0","name":"multus-cni-network","type":"multus","clusterNetwork":"` + primary + `","agentSocket":"` + g.sock + `"` + extra + `}`
	return conf, g
}

const networks = "k8s.v1.cni.cncf.io/networks"

// TestSelectionFields: every field of the network selection element has
// the effect Multus gives it; each check fails when the field is dropped.
func TestSelectionFields(t *testing.T) {
	conf, g := selectionSetup(t, "")
	n := fullNode(t)

	t.Run("ips mac interface", func(t *testing.T) {
		p := multusPod(t, n, g, "default", "sel1", conf, map[string]string{networks: `[{"name":"static","interface":"data1","ips":["10.77.20.9/24"],"mac":"02:00:00:00:20:09"}]`})
		if a := podAddr(t, p.Netns, "data1"); a != netip.MustParseAddr("10.77.20.9") {
			t.Errorf("data1 has %s, want the requested 10.77.20.9", a)
		}
		if mac := roletest.InNS(t, p.Netns, (*netops.Handle).Links); !slices.ContainsFunc(mac, func(l netops.Link) bool { return l.Name == "data1" && l.MAC.String() == "02:00:00:00:20:09" }) {
			t.Errorf("data1 does not have the requested MAC 02:00:00:00:20:09")
		}
	})
	t.Run("interfaceRequest (pre-3.2 name)", func(t *testing.T) {
		p := multusPod(t, n, g, "default", "sel1b", conf, map[string]string{networks: `[{"name":"static","interfaceRequest":"old1","ips":["10.77.20.10/24"]}]`})
		if !hasLink(t, p.Netns, "old1") {
			t.Errorf("no old1")
		}
	})
	t.Run("cni-args", func(t *testing.T) {
		// static IPAM takes its addresses from args.cni.ips, on a network
		// that declares the ips capability.
		p := multusPod(t, n, g, "default", "sel2", conf, map[string]string{networks: `[{"name":"static","cni-args":{"ips":["10.77.20.11/24"]}}]`})
		if a := podAddr(t, p.Netns, "net1"); a != netip.MustParseAddr("10.77.20.11") {
			t.Errorf("net1 has %s, want 10.77.20.11 from cni-args", a)
		}
	})
	t.Run("cni-args without the capability is refused", func(t *testing.T) {
		// issue 48: "plain" declares no capability; cni-args' ips, mac
		// and portMappings (in any case encoding/json takes) are not the
		// pod's to ask for there.
		for i, args := range []string{`{"ips":["10.77.20.15/24"]}`, `{"IPs":["10.77.20.15/24"]}`, `{"mac":"02:00:00:00:20:15"}`,
			`{"portMappings":[{"hostPort":8081,"containerPort":80}]}`} {
			p := n.NewPod(fmt.Sprintf("sel6-%d", i))
			g.pod("default", p.ID, map[string]string{networks: `[{"name":"plain","cni-args":` + args + `}]`})
			n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID
			_, _, err := n.Call(multi.MultusRole, "ADD", p, conf)
			if cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "cni-args") || !strings.Contains(err.Error(), "capabilities") {
				t.Errorf("cni-args %s on a network without the capability: ADD = %v, want 7 naming cni-args and the capability", args, err)
			}
			if hasLink(t, p.Netns, "net1") || hasLink(t, p.Netns, "eth0") {
				t.Errorf("cni-args %s: interfaces left in the pod after the refused ADD", args)
			}
		}
	})
	t.Run("default-route", func(t *testing.T) {
		p := multusPod(t, n, g, "default", "sel3", conf, map[string]string{networks: `[{"name":"static","ips":["10.77.20.12/24"],"default-route":["10.77.20.1"]}]`})
		if got := defaultRoutes(t, p.Netns); !slices.Equal(got, []string{"via 10.77.20.1 dev net1"}) {
			t.Errorf("default routes %v, want only via 10.77.20.1 dev net1 (eth0's removed)", got)
		}
		// CHECK passes with the changed routes (the record has them).
		n.Must(multi.MultusRole, "CHECK", p, conf)
	})
	t.Run("bandwidth portMappings infiniband-guid", func(t *testing.T) {
		p := multusPod(t, n, g, "default", "sel4", conf, map[string]string{networks: `[{"name":"chain","bandwidth":{"ingressRate":8000000,"ingressBurst":80000,"egressRate":8000000,"egressBurst":80000},` +
			`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],"infiniband-guid":"c2:11:22:33:44:55:66:77"}]`})
		rec := record(t, n, "multus-cni-network", p, "net1")
		if bw := pluginRC(rec, 1)["bandwidth"]; bw == nil {
			t.Errorf("bandwidth plugin got no runtimeConfig.bandwidth: %s", jsonq(rec))
		}
		if pm := pluginRC(rec, 2)["portMappings"]; pm == nil {
			t.Errorf("portmap plugin got no runtimeConfig.portMappings: %s", jsonq(rec))
		}
		if ib := pluginRC(rec, 3)["infinibandGUID"]; ib != "c2:11:22:33:44:55:66:77" {
			t.Errorf("tuning got infinibandGUID %v: %s", ib, jsonq(rec))
		}
		// The bandwidth plugin shaped the host side of net1 (the bridge's
		// result names it: the interface without a sandbox that is not
		// the bridge).
		host := ""
		for _, r := range n.Records("multus-cni-network") {
			for _, d := range r.Delegates {
				if r.ContainerID != p.ID || d.IfName != "net1" {
					continue
				}
				res := roletest.Result(t, d.Result, "1.0.0")
				for _, ifc := range res.Interfaces {
					if ifc.Sandbox == "" && ifc.Name != "mu-c" {
						host = ifc.Name
					}
				}
			}
		}
		if host == "" {
			t.Fatalf("no host veth of net1 in the record")
		}
		if _, found, err := roletest.Open(t, "").RootTBF(host); err != nil || !found {
			t.Errorf("no ingress TBF on %s (found %v, %v)", host, found, err)
		}
	})
	t.Run("a field no plugin takes is refused", func(t *testing.T) {
		p := n.NewPod("sel5")
		g.pod("default", p.ID, map[string]string{networks: `[{"name":"plain","ips":["10.77.20.13/24"]}]`})
		n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID
		if _, _, err := n.Call(multi.MultusRole, "ADD", p, conf); cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "ips") {
			t.Errorf("ADD = %v, want 7 naming the ips capability", err)
		}
	})
}

// TestMultusDefaultNetworkAnnotation: v1.multus-cni.io/default-network
// replaces the primary with a NAD of multusNamespace (kube-system);
// network-status names it, default.
func TestMultusDefaultNetworkAnnotation(t *testing.T) {
	conf, g := selectionSetup(t, "")
	n := fullNode(t)
	p := multusPod(t, n, g, "default", "alt", conf, map[string]string{"v1.multus-cni.io/default-network": "altnet"})
	if a := podAddr(t, p.Netns, "eth0"); !netip.MustParsePrefix("10.77.30.0/24").Contains(a) {
		t.Errorf("eth0 has %s, want the default-network's 10.77.30.0/24", a)
	}
	st := g.networkStatus(t, "default", p.ID)
	if e := statusOf(t, st, "eth0"); e["name"] != "kube-system/altnet" || e["default"] != true {
		t.Errorf("eth0's status %s, want kube-system/altnet, default", jsonq(e))
	}
}

// TestMultusDefaultNetworkIsolation: with namespaceIsolation the
// default-network annotation is held to the pod's namespace and
// globalNamespaces, as the networks annotation is (issue 48: it was not
// checked at all), and its NAD is asked for with the pod's namespace, so
// the agent's own isolation applies too; globalNamespaces with
// kube-system (cnibox-multus.yaml's) lets it through.
func TestMultusDefaultNetworkIsolation(t *testing.T) {
	ann := map[string]string{"v1.multus-cni.io/default-network": "altnet"}
	n := fullNode(t)
	on, g := selectionSetup(t, `,"namespaceIsolation":true`)
	p := n.NewPod("dniso1")
	g.pod("team-a", p.ID, ann)
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + p.ID
	if _, _, err := n.Call(multi.MultusRole, "ADD", p, on); cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "namespaceIsolation") ||
		!strings.Contains(err.Error(), "v1.multus-cni.io/default-network") {
		t.Errorf("default-network kube-system/altnet from team-a with isolation: ADD = %v, want 7 naming the annotation and namespaceIsolation", err)
	}
	if hasLink(t, p.Netns, "eth0") {
		t.Errorf("eth0 left in the pod after the refused ADD")
	}

	global, g2 := selectionSetup(t, `,"namespaceIsolation":true,"globalNamespaces":"default,kube-system"`)
	q := multusPod(t, n, g2, "team-a", "dniso2", global, ann)
	if a := podAddr(t, q.Netns, "eth0"); !netip.MustParsePrefix("10.77.30.0/24").Contains(a) {
		t.Errorf("eth0 has %s, want the default-network's 10.77.30.0/24 (kube-system is global)", a)
	}
	g2.mu.Lock()
	defer g2.mu.Unlock()
	for _, r := range g2.asked {
		if r.Op == agentapi.OpNetAttachDef && r.Name == "altnet" && r.PodNamespace != "team-a" {
			t.Errorf("the default network's NAD was asked for with podNamespace %q, want the pod's team-a", r.PodNamespace)
		}
	}
}

// TestMultusDefaultNetworks: defaultNetworks go to every pod but those of
// systemNamespaces.
func TestMultusDefaultNetworks(t *testing.T) {
	conf, g := selectionSetup(t, `,"defaultNetworks":["sidenet"],"systemNamespaces":["kube-system","admin"]`)
	n := fullNode(t)
	p := multusPod(t, n, g, "default", "side", conf, nil)
	if a := podAddr(t, p.Netns, "net1"); !netip.MustParsePrefix("10.77.31.0/24").Contains(a) {
		t.Errorf("net1 has %s, want sidenet's 10.77.31.0/24", a)
	}
	sys := multusPod(t, n, g, "admin", "sys", conf, nil)
	if hasLink(t, sys.Netns, "net1") {
		t.Errorf("a pod of a system namespace got the default network")
	}
}

// TestMultusNamespaceIsolation: off by default (as Multus): a pod selects a
// NAD of another namespace; on, it is refused unless that namespace is in
// globalNamespaces.
func TestMultusNamespaceIsolation(t *testing.T) {
	ann := map[string]string{networks: `[{"name":"static","namespace":"other","ips":["10.77.22.5/24"]}]`}
	conf, g := selectionSetup(t, "")
	n := fullNode(t)
	p := multusPod(t, n, g, "default", "iso1", conf, ann)
	if !hasLink(t, p.Netns, "net1") {
		t.Errorf("cross-namespace NAD not attached with namespaceIsolation off (Multus' default)")
	}

	on, g2 := selectionSetup(t, `,"namespaceIsolation":true`)
	q := n.NewPod("iso2")
	g2.pod("default", q.ID, ann)
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + q.ID
	if _, _, err := n.Call(multi.MultusRole, "ADD", q, on); cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "namespaceIsolation") {
		t.Errorf("ADD with isolation = %v, want 7 naming namespaceIsolation", err)
	}

	global, g3 := selectionSetup(t, `,"namespaceIsolation":true,"globalNamespaces":"default, other"`)
	r := multusPod(t, n, g3, "default", "iso3", global, ann)
	if !hasLink(t, r.Netns, "net1") {
		t.Errorf("NAD of a globalNamespaces namespace refused")
	}
}

// TestMultusNADRefused: a NAD the agent's policy refuses (an untrusted
// namespace's NAD outside the allowlist: agent/podapi) fails the ADD with
// error 7 carrying the agent's message (the field and the fix), and
// nothing is left in the pod.
func TestMultusNADRefused(t *testing.T) {
	conf, g := selectionSetup(t, "")
	const msg = "network-attachment-definition team-a/evil: spec.config field ipam.log_file names a file on the node"
	g.mu.Lock()
	g.refused["team-a/evil"] = msg
	g.mu.Unlock()
	n := fullNode(t)
	p := n.NewPod("refused")
	g.pod("default", p.ID, map[string]string{networks: "team-a/evil"})
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.ID
	if _, _, err := n.Call(multi.MultusRole, "ADD", p, conf); cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), msg) {
		t.Errorf("ADD with a refused NAD = %v (code %d), want 7 with the agent's message", err, cniplug.CodeOf(err))
	}
	if hasLink(t, p.Netns, "eth0") || hasLink(t, p.Netns, "net1") {
		t.Errorf("interfaces left in the pod after the refused ADD")
	}
}

// TestMultusNetworkStatus: every field Multus writes, and the
// AddedInterface events.
func TestMultusNetworkStatus(t *testing.T) {
	conf, g := selectionSetup(t, "")
	n := fullNode(t)
	p := multusPod(t, n, g, "default", "st", conf, map[string]string{networks: `[{"name":"static","ips":["10.77.20.14/24"],"mac":"02:00:00:00:20:14"}]`})
	st := g.networkStatus(t, "default", p.ID)
	if len(st) != 2 {
		t.Fatalf("network-status %s, want 2 entries", jsonq(st))
	}
	eth0, net1 := statusOf(t, st, "eth0"), statusOf(t, st, "net1")
	links := map[string]netops.Link{}
	for _, l := range roletest.InNS(t, p.Netns, (*netops.Handle).Links) {
		links[l.Name] = l
	}
	ip := podAddr(t, p.Netns, "eth0").String()
	for _, c := range []struct {
		e     map[string]any
		field string
		want  any
	}{
		{eth0, "name", "podnet"}, {eth0, "default", true}, {eth0, "ips", []any{ip}},
		{eth0, "mac", links["eth0"].MAC.String()},
		{eth0, "gateway", []any{"10.77.10.1"}}, {eth0, "dns", map[string]any{}},
		{net1, "name", "default/static"}, {net1, "default", nil}, {net1, "ips", []any{"10.77.20.14"}},
		{net1, "mac", "02:00:00:00:20:14"}, {net1, "gateway", nil},
	} {
		if got := c.e[c.field]; jsonq(got) != jsonq(c.want) {
			t.Errorf("%s's %s = %s, want %s", c.e["interface"], c.field, jsonq(got), jsonq(c.want))
		}
	}
	g.mu.Lock()
	ev := g.events["default/"+p.ID]
	g.mu.Unlock()
	var msgs []string
	for _, e := range ev {
		if e.Reason == "AddedInterface" && e.Type == "Normal" {
			msgs = append(msgs, e.Message)
		}
	}
	want := []string{"Add eth0 [" + ip + "/24] from podnet", "Add net1 [10.77.20.14/24] from default/static"}
	if !slices.Equal(msgs, want) {
		t.Errorf("AddedInterface events %q, want %q", msgs, want)
	}
}
