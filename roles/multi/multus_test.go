package multi_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/delegatetest"
	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/multi"
)

// primaryList is the primary network: bridge mu-p, 10.77.10.0/24, default
// route via 10.77.10.1 (in the result too: isDefaultGateway).
const primaryList = `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","bridge":"mu-p","isGateway":true,"isDefaultGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.10.0/24"}]]}}]}`

// defaultRoutes returns the pod's default routes (as "via GW dev IF").
func defaultRoutes(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, r := range roletest.InNS(t, ns, func(h *netops.Handle) ([]netops.Route, error) { return h.Routes("") }) {
		if !r.Dst.IsValid() || r.Dst.Bits() == 0 {
			out = append(out, "via "+r.GW.String()+" dev "+r.Dev)
		}
	}
	return out
}

// TestMultusThickConfig: the config Multus' thick daemon generates
// (pkg/server/config/generator.go: the daemon-config.json of its thick
// manifest, clusterNetwork = the primary's conflist, capabilities copied
// from it), unchanged but for the path, as type multus-shim: the primary
// runs on eth0; DEL twice removes it.
func TestMultusThickConfig(t *testing.T) {
	n := fullNode(t)
	dir := t.TempDir()
	primary := filepath.Join(dir, "10-podnet.conflist")
	os.WriteFile(primary, []byte(primaryList), 0o644)
	conf := `{"capabilities":{"portMappings":true},"cniVersion":"0.3.1","logLevel":"verbose","logToStderr":true,"name":"multus-cni-network","clusterNetwork":"` + primary + `","type":"multus-shim"}`
	p := n.NewPod("thick")
	n.Env["CNI_ARGS"] = "" // no agent here: the pod path is not on (no kubeconfig) anyway
	n.Add(multi.MultusShimRole, p, conf)
	if a := podAddr(t, p.Netns, "eth0"); !netip.MustParsePrefix("10.77.10.0/24").Contains(a) {
		t.Errorf("eth0 has %s, want an address of the primary's 10.77.10.0/24", a)
	}
	n.Must(multi.MultusShimRole, "DEL", p, conf)
	n.Must(multi.MultusShimRole, "DEL", p, conf)
	if hasLink(t, p.Netns, "eth0") {
		t.Errorf("eth0 still there after DEL")
	}
}

// TestMultusClusterNetwork: clusterNetwork as a directory (its first file
// that is not Multus' own), a network name in confDir, and a NAD in
// multusNamespace; delegates are ignored when clusterNetwork is set; a
// delegate without a name is accepted (Multus' docs' example).
func TestMultusClusterNetwork(t *testing.T) {
	dir := t.TempDir()
	netd := filepath.Join(dir, "net.d")
	confDir := filepath.Join(dir, "multus.d")
	os.MkdirAll(netd, 0o755)
	os.MkdirAll(confDir, 0o755)
	os.WriteFile(filepath.Join(netd, "00-multus.conf"), []byte(`{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","clusterNetwork":"`+netd+`"}`), 0o644)
	os.WriteFile(filepath.Join(netd, "10-podnet.conflist"), []byte(primaryList), 0o644)
	os.WriteFile(filepath.Join(confDir, "byname.conf"), []byte(`{"cniVersion":"1.0.0","name":"byname","type":"bridge","bridge":"mu-n","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.11.0/24"}]]}}`), 0o644)
	ignored := `"delegates":[{"type":"bridge","bridge":"mu-x","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.99.0/24"}]]}}]`
	g := newPodAgent(t)
	g.nad("kube-system", "bynad", `{"cniVersion":"1.0.0","name":"bynad","type":"bridge","bridge":"mu-k","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.12.0/24"}]]}}`)
	for _, tc := range []struct {
		name, cluster, extra, want string
		pod                        bool
	}{
		{"directory", netd, "", "10.77.10.0/24", false},
		{"confDir name", "byname", `,"confDir":"` + confDir + `"`, "10.77.11.0/24", false},
		{"NAD name", "bynad", `,"confDir":"` + confDir + `","agentSocket":"` + g.sock + `"`, "10.77.12.0/24", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := fullNode(t)
			p := n.NewPod("cn" + strings.ReplaceAll(tc.name, " ", ""))
			if tc.pod {
				g.pod("default", p.ID, nil)
			} else {
				n.Env["CNI_ARGS"] = ""
			}
			conf := `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","clusterNetwork":"` + tc.cluster + `",` + ignored + tc.extra + `}`
			n.Add(multi.MultusRole, p, conf)
			if a := podAddr(t, p.Netns, "eth0"); !netip.MustParsePrefix(tc.want).Contains(a) {
				t.Errorf("eth0 has %s, want an address of %s", a, tc.want)
			}
			if hasLink(t, p.Netns, "net1") {
				t.Errorf("the ignored delegate was attached")
			}
			if tc.pod {
				st := g.networkStatus(t, "default", p.ID)
				if len(st) != 1 || st[0]["name"] != "kube-system/bynad" || st[0]["default"] != true {
					t.Errorf("network-status = %s, want one default entry named kube-system/bynad", jsonq(st))
				}
			}
			n.Must(multi.MultusRole, "DEL", p, conf)
		})
	}
	n := fullNode(t)
	_, _, err := n.Call(multi.MultusRole, "ADD", n.NewPod("none"), `{"cniVersion":"0.3.1","name":"m","type":"multus"}`)
	if cniplug.CodeOf(err) != 7 || !strings.Contains(err.Error(), "clusterNetwork") {
		t.Errorf("ADD without delegates and clusterNetwork = %v, want 7 naming clusterNetwork", err)
	}
}

// TestMultusReadinessIndicator: STATUS is 50 while readinessindicatorfile
// is missing; ADD waits for it and proceeds once it appears.
func TestMultusReadinessIndicator(t *testing.T) {
	n := fullNode(t)
	dir := t.TempDir()
	primary := filepath.Join(dir, "10-podnet.conflist")
	os.WriteFile(primary, []byte(primaryList), 0o644)
	ready := filepath.Join(dir, "ready")
	conf := `{"cniVersion":"1.1.0","name":"multus-cni-network","type":"multus","clusterNetwork":"` + primary + `","readinessindicatorfile":"` + ready + `"}`
	n.Env["CNI_ARGS"] = ""
	if _, _, err := n.Call(multi.MultusRole, "STATUS", delegatetest.Pod{}, conf); cniplug.CodeOf(err) != 50 || !strings.Contains(err.Error(), ready) {
		t.Errorf("STATUS without %s = %v, want 50 naming it", ready, err)
	}
	go func() {
		time.Sleep(time.Second)
		os.WriteFile(ready, nil, 0o644)
	}()
	p := n.NewPod("ready")
	n.Add(multi.MultusRole, p, conf)
	if _, err := os.Stat(ready); err != nil {
		t.Fatalf("ADD returned before %s existed", ready)
	}
	n.Must(multi.MultusRole, "STATUS", delegatetest.Pod{}, conf)
	n.Must(multi.MultusRole, "DEL", p, conf)
}

// multusPod runs a multus ADD of a pod with the given annotations against
// the agent and returns the pod.
func multusPod(t *testing.T, n *delegatetest.Node, g *podAgent, ns, name, conf string, ann map[string]string) delegatetest.Pod {
	t.Helper()
	p := n.NewPod(name)
	g.pod(ns, p.ID, ann)
	n.Env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + p.ID
	n.Add(multi.MultusRole, p, conf)
	t.Cleanup(func() { n.Call(multi.MultusRole, "DEL", p, conf) })
	return p
}

// record returns the recorded config of the pod's delegate on ifname.
func record(t *testing.T, n *delegatetest.Node, network string, p delegatetest.Pod, ifname string) map[string]any {
	t.Helper()
	for _, r := range n.Records(network) {
		if r.ContainerID != p.ID {
			continue
		}
		for _, d := range r.Delegates {
			if d.IfName == ifname {
				var m map[string]any
				json.Unmarshal(d.Conf, &m)
				return m
			}
		}
	}
	t.Fatalf("no record of %s on %s", p.ID, ifname)
	return nil
}

// pluginRC returns runtimeConfig of plugin j of a recorded conflist.
func pluginRC(m map[string]any, j int) map[string]any {
	ps, _ := m["plugins"].([]any)
	if j >= len(ps) {
		return nil
	}
	p, _ := ps[j].(map[string]any)
	rc, _ := p["runtimeConfig"].(map[string]any)
	return rc
}

// TestMultusDelWithoutRecord: a pod attached before cnibox took Multus'
// place (here: attached by multi, its record then deleted, so the store
// knows nothing of it) is deleted with every network its annotations
// name, as Multus' DEL does without its cache: the secondary's interface
// and host-local reservation go, not only the primary's. With the pod
// gone from the API, DEL deletes the primary and succeeds.
func TestMultusDelWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	primary := filepath.Join(dir, "10-podnet.conflist")
	os.WriteFile(primary, []byte(primaryList), 0o644)
	g := newPodAgent(t)
	g.nad("default", "sec", `{"cniVersion":"1.0.0","name":"sec","type":"bridge","bridge":"mu-s","ipam":{"type":"host-local","ranges":[[{"subnet":"10.77.13.0/24"}]]}}`)
	conf := `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","clusterNetwork":"` + primary + `","agentSocket":"` + g.sock + `"}`
	for _, podGone := range []bool{false, true} {
		n := fullNode(t)
		p := n.NewPod(map[bool]string{false: "norec", true: "norecgone"}[podGone])
		g.pod("default", p.ID, map[string]string{networks: "sec"})
		n.Add(multi.MultusShimRole, p, conf)
		if !hasLink(t, p.Netns, "net1") || len(n.Reservations("sec")[p.ID]) != 1 {
			t.Fatalf("ADD: net1 %v, sec reservations %v", hasLink(t, p.Netns, "net1"), n.Reservations("sec"))
		}
		n.DeleteRecord("multus-cni-network", p)
		if podGone {
			g.mu.Lock()
			delete(g.pods, "default/"+p.ID)
			g.mu.Unlock()
		}
		n.Must(multi.MultusShimRole, "DEL", p, conf)
		if hasLink(t, p.Netns, "eth0") || len(n.Reservations("podnet")[p.ID]) != 0 {
			t.Errorf("pod gone %v: the primary is left after DEL (eth0 %v, reservations %v)", podGone, hasLink(t, p.Netns, "eth0"), n.Reservations("podnet"))
		}
		secLeft := hasLink(t, p.Netns, "net1") || len(n.Reservations("sec")[p.ID]) != 0
		if secLeft != podGone {
			t.Errorf("pod gone %v: after DEL the secondary is left: %v (net1 %v, reservations %v)", podGone, secLeft, hasLink(t, p.Netns, "net1"), n.Reservations("sec"))
		}
		n.Must(multi.MultusShimRole, "DEL", p, conf)
	}
}
