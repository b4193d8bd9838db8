//go:build kube

package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/test/internal/upstream"
)

// The primary network of TestKubeNodeMultusOverBridge: the reference
// bridge plugin as a plain conflist, the node's network before cnibox.
const (
	primaryName = "mynet"
	primaryFile = "10-mynet.conflist"
	// multusFile is what cnibox-multus.yaml's agent writes in front of it.
	multusFile = "00-cnibox-multus.conflist"
	// macAddr is the macvlan network's address in the pod, on the
	// cluster's underlay (the nodes' 172.31.250.0/24), whose gateway is
	// clusterUplink.
	macAddr = "172.31.250.100"
)

// primaryPlugins are the reference plugins the primary needs (containerd
// runs loopback itself): all the node has before cnibox.
var primaryPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// primaryConflist is the node's primary: the reference bridge with
// host-local in the node's podCIDR and portmap, as containerd's and the
// reference plugins' examples write it.
func primaryConflist(cidr netip.Prefix) string {
	return `{"cniVersion":"1.0.0","name":"` + primaryName + `","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"` + cidr.String() + `"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}
`
}

// macNAD is a macvlan network on the node's NIC whose addresses come from
// the cluster IPAM, written for whereabouts as its README writes one (no
// field of cnibox's): range_start is what whereabouts hands out first.
const macNAD = `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition",
"metadata":{"name":"macnet","namespace":"default"},
"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"name\":\"macnet\",\"type\":\"macvlan\",\"master\":\"eth0\",\"mode\":\"bridge\",\"ipam\":{\"type\":\"whereabouts\",\"range\":\"172.31.250.0/24\",\"range_start\":\"` + macAddr + `\",\"range_end\":\"172.31.250.109\"}}"}}`

// macPool is the IPPool (kube-system) of macNAD's range, named as
// whereabouts names it; macOffset is macAddr's key in its allocations.
const (
	macPool   = "172.31.250.0-24"
	macOffset = "100"
)

// macAllocation returns the podref macPool's allocations hold at
// macOffset ("" when none), as `kubectl get ippools` shows them.
func macAllocation(t *testing.T, c *cluster) (string, error) {
	t.Helper()
	out, err := c.kubectl("-n", "kube-system", "get", "ippools.whereabouts.cni.cncf.io", macPool, "-o", "json")
	if err != nil {
		return "", err
	}
	var pool struct {
		Spec struct {
			Range       string
			Allocations map[string]struct{ PodRef string }
		}
	}
	if err := json.Unmarshal([]byte(out), &pool); err != nil {
		return "", fmt.Errorf("IPPool %s: %w", macPool, err)
	}
	if pool.Spec.Range != "172.31.250.0/24" {
		return "", fmt.Errorf("IPPool %s has range %q, want 172.31.250.0/24", macPool, pool.Spec.Range)
	}
	return pool.Spec.Allocations[macOffset].PodRef, nil
}

// TestKubeNodeMultusOverBridge is "Multus over any primary" as an
// operator does it: a node whose network is the reference bridge plugin
// (v1.9.1, only the plugins it needs on the node) in a plain conflist;
// `kubectl apply` of nad-crd.yaml, whereabouts-crds.yaml and
// cnibox-multus.yaml; a pod with two secondaries from NADs, a macvlan on
// the node's NIC on whereabouts' IPAM (its IPPool) with default-route
// through it and a host-device whose device the kubelet allocated
// (resourceName); then `kubectl delete -f cnibox-multus.yaml`, after which
// the node's network is the bridge again and the NADs and pools are still
// there.
func TestKubeNodeMultusOverBridge(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	manifestPath := env(t, "CNIBOX_MULTUS_MANIFEST", "make image's manifest (bin/cnibox-multus.yaml)")
	raw, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	manifest := []byte(trustDefault(string(raw)))
	kubeBinaries(t)
	// built in the host's namespaces, before any node starts
	refDir, err := upstream.Plugins(primaryPlugins...)
	if err != nil {
		t.Fatal(err)
	}

	c := startCluster(t, 1)
	nd := c.nodes[0]
	t.Cleanup(func() {
		if t.Failed() {
			out, err := c.kubectl("-n", "kube-system", "logs", "-l", "app=cnibox-multus", "--all-containers", "--prefix", "--tail=60")
			t.Logf("cnibox-multus logs: %v\n%s", err, out)
		}
	})
	c.importImages(imageTar)
	bin, confDir := nd.hostDir("/opt/cni/bin"), nd.hostDir("/etc/cni/net.d")
	var cidr netip.Prefix
	var primary []byte
	step(t, "the node's network is the reference bridge", func() {
		ents, err := os.ReadDir(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents { // startCluster's Debian plugins: not this node's
			if err := os.Remove(filepath.Join(bin, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range primaryPlugins {
			copyFile(t, filepath.Join(refDir, p), filepath.Join(bin, p), 0o755)
		}
		c.poll("the node's podCIDR", func() error {
			out, err := c.kubectl("get", "node", nd.name, "-o", "jsonpath={.spec.podCIDR}")
			if err == nil && out == "" {
				err = fmt.Errorf("none yet")
			}
			return err
		})
		cidr = c.podCIDR(nd)
		primary = []byte(primaryConflist(cidr))
		if err := os.WriteFile(filepath.Join(confDir, primaryFile), primary, 0o644); err != nil {
			t.Fatal(err)
		}
		c.must("wait", "--for=condition=Ready", "node/"+nd.name, c.timeout())
		c.startPodsOn("keep", nd)
		c.startPodsOn("gone", nd)
		mustPing(t, c.node, "keep-1", "gone-1")
	})

	step(t, "kubectl apply nad-crd.yaml, whereabouts-crds.yaml and cnibox-multus.yaml: multi in front of the bridge", func() {
		applyNADCRD(t, c.node)
		applyCRDs(t, c.node, whereaboutsCRDFile, "ippools.whereabouts.cni.cncf.io",
			"overlappingrangeipreservations.whereabouts.cni.cncf.io", "nodeslicepools.whereabouts.cni.cncf.io")
		if out, err := c.kubectlIn(string(manifest), "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply -f %s: %v", manifestPath, err)
		} else {
			t.Logf("kubectl apply -f %s:\n%s", manifestPath, strings.TrimSpace(out))
		}
		c.must("-n", "kube-system", "rollout", "status", "ds/cnibox-multus", c.timeout())
		var conf struct {
			CNIVersion string `json:"cniVersion"`
			Plugins    []struct {
				Type           string          `json:"type"`
				ClusterNetwork string          `json:"clusterNetwork"`
				Kubernetes     bool            `json:"kubernetes"`
				Capabilities   map[string]bool `json:"capabilities"`
			} `json:"plugins"`
		}
		c.poll("the agent's "+multusFile, func() error {
			data, err := os.ReadFile(filepath.Join(confDir, multusFile))
			if err != nil {
				return err
			}
			return json.Unmarshal(data, &conf)
		})
		if len(conf.Plugins) != 1 || conf.CNIVersion != "1.0.0" || conf.Plugins[0].Type != "multi" || !conf.Plugins[0].Kubernetes ||
			conf.Plugins[0].ClusterNetwork != "/etc/cni/net.d/"+primaryFile || !reflect.DeepEqual(conf.Plugins[0].Capabilities, map[string]bool{"portMappings": true}) {
			t.Fatalf("%s: %+v; want multi with clusterNetwork /etc/cni/net.d/%s, cniVersion 1.0.0, portMappings", multusFile, conf, primaryFile)
		}
		// the install step added cnibox's roles and left the primary's plugins
		for _, p := range primaryPlugins {
			if !sameFile(t, filepath.Join(refDir, p), filepath.Join(bin, p)) {
				t.Errorf("%s/%s is no longer the reference plugin: cnibox install replaced it", bin, p)
			}
		}
		for _, role := range []string{"multi", "macvlan", "host-device", "whereabouts"} {
			if target, err := os.Readlink(filepath.Join(bin, role)); err != nil || target != "cnibox" {
				t.Errorf("%s/%s: want a relative link to cnibox, got %q %v", bin, role, target, err)
			}
		}
	})

	macs := vethLAN(t, nd)
	plugin := startVethPlugin(t, nd, vethResource, vethDevices...)
	waitAllocatable(t, c.node, nd.name)
	step(t, "a pod with a macvlan (whereabouts, default-route) and a host-device from NADs", func() {
		c.apply(macNAD)
		c.apply(vethNAD)
		networks := `[{"name":"macnet","default-route":["` + clusterUplink + `"]},{"name":"vethnet"}]`
		c.apply(devicePod(t, "pod-multi", map[string]string{"k8s.v1.cni.cncf.io/networks": networks}))
		c.must("wait", "--for=condition=Ready", c.timeout(), "pod/pod-multi")
		checkMultiPod(t, c, macs, plugin.Allocated(), cidr)
		if ref, err := macAllocation(t, c); err != nil || ref != "default/pod-multi" {
			t.Errorf("IPPool %s allocation %s: podref %q (%v), want default/pod-multi", macPool, macOffset, ref, err)
		}
	})

	step(t, "a pod started on the bridge alone is deleted through multi", func() {
		ip := podIP(t, c.node, "gone-1")
		lease := "/var/lib/cni/networks/" + primaryName + "/" + ip.String()
		if _, err := nd.nodeFile(lease); err != nil {
			t.Fatalf("host-local's reservation of gone-1: %v", err)
		}
		c.must("delete", "pod", "gone-1", "--wait", c.timeout())
		c.poll("gone-1's address released", func() error {
			if _, err := nd.nodeFile(lease); err == nil {
				return fmt.Errorf("%s is still there", lease)
			}
			return nil
		})
	})

	step(t, "deleting the pod gives the device back and its address to the pool", func() {
		dev := plugin.Allocated()[0]
		c.must("delete", "pod", "pod-multi", "--wait", c.timeout())
		c.poll("the device back on the node", func() error {
			if mac, err := nd.nodeMAC(dev); err != nil || mac != macs[dev] {
				return fmt.Errorf("%s on the node: MAC %q %v, want %s", dev, mac, err, macs[dev])
			}
			return nil
		})
		c.poll(macAddr+" released in IPPool "+macPool, func() error {
			if ref, err := macAllocation(t, c); err != nil || ref != "" {
				return fmt.Errorf("allocation %s: podref %q (%v)", macOffset, ref, err)
			}
			return nil
		})
	})

	step(t, "a pod with a macvlan on dhcp: the DaemonSet's dhcp daemon leases its address and releases it", func() {
		checkDHCPPod(t, c, startDHCPServer(t, c))
	})

	step(t, "kubectl delete -f cnibox-multus.yaml: the bridge is the node's network again, the NADs stay", func() {
		keepIP := podIP(t, c.node, "keep-1")
		if _, err := c.kubectlIn(string(manifest), "delete", "-f", "-", "--wait", c.timeout()); err != nil {
			t.Fatalf("kubectl delete -f %s: %v", manifestPath, err)
		}
		c.must("-n", "kube-system", "wait", "--for=delete", "pod", "-l", "app=cnibox-multus", c.timeout())
		c.poll(multusFile+" removed", func() error {
			if _, err := os.Stat(filepath.Join(confDir, multusFile)); err == nil {
				return fmt.Errorf("%s is still in the node's %s", multusFile, confDir)
			}
			return nil
		})
		if got, err := os.ReadFile(filepath.Join(confDir, primaryFile)); err != nil || !bytes.Equal(got, primary) {
			t.Errorf("the primary conflist changed: %v\n%s", err, got)
		}
		c.must("get", "network-attachment-definitions", "macnet", "vethnet", "dhcpnet")
		c.must("-n", "kube-system", "get", "ippools.whereabouts.cni.cncf.io", macPool)

		c.startPodsOn("after", nd)
		p := getPod(t, c.node, "after-1")
		if st, ok := p.Annotations["k8s.v1.cni.cncf.io/network-status"]; ok {
			t.Errorf("after-1 has a network-status (%s): multi is still in the path", st)
		}
		if out, err := c.kubectl("exec", "after-1", "--", "ip", "-o", "link", "show", "net1"); err == nil {
			t.Errorf("after-1 has a net1: %s", out)
		}
		if k := getPod(t, c.node, "keep-1"); k.Status.PodIP != keepIP.String() {
			t.Errorf("keep-1 has %q, had %s", k.Status.PodIP, keepIP)
		}
		mustPing(t, c.node, "after-1", "keep-1")
		mustPing(t, c.node, "keep-1", "after-1")
	})
}

// checkMultiPod checks pod-multi as a user would: its three interfaces and
// their addresses, the default route through net1, what each network
// reaches, network-status field by field and the AddedInterface events.
func checkMultiPod(t *testing.T, c *cluster, macs map[string]string, allocated []string, cidr netip.Prefix) {
	t.Helper()
	if len(allocated) != 1 || macs[allocated[0]] == "" {
		t.Fatalf("the kubelet allocated %v, want one of %v", allocated, vethDevices)
	}
	dev := allocated[0]
	p := getPod(t, c.node, "pod-multi")
	if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || !cidr.Contains(ip) {
		t.Fatalf("pod-multi's podIP %q is not in the node's podCIDR %s (the bridge's)", p.Status.PodIP, cidr)
	}
	exec := func(args ...string) string { return c.must(append([]string{"exec", "pod-multi", "--"}, args...)...) }
	ifMAC := func(ifc string) string { return strings.TrimSpace(exec("cat", "/sys/class/net/"+ifc+"/address")) }
	for ifc, addr := range map[string]string{"eth0": p.Status.PodIP + "/" + fmt.Sprint(cidr.Bits()), "net1": macAddr + "/24", "net2": lanPodAddr + "/24"} {
		if out := exec("ip", "-o", "-4", "addr", "show", "dev", ifc); !strings.Contains(out, " "+addr+" ") {
			t.Errorf("pod-multi's %s lacks %s: %s", ifc, addr, out)
		}
	}
	if got := ifMAC("net2"); got != macs[dev] {
		t.Errorf("pod-multi's net2 has MAC %s, want %s (the allocated %s)", got, macs[dev], dev)
	}
	routes := exec("ip", "-4", "route", "show", "default")
	if lines := strings.Split(strings.TrimSpace(routes), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "default via "+clusterUplink+" dev net1") {
		t.Errorf("pod-multi's default routes:\n%s\nwant only default via %s dev net1", routes, clusterUplink)
	}
	exec("ping", "-c", "1", "-W", "5", clusterUplink) // the underlay, through the macvlan
	exec("ping", "-c", "1", "-W", "5", lanGateway)    // the LAN, through the device
	mustPing(t, c.node, "pod-multi", "keep-1")        // the pod network, through the bridge

	var st []fullStatus
	raw := p.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st) != 3 {
		t.Fatalf("network-status: want 3 entries, got %q (%v)", raw, err)
	}
	// The primary: its default route (host-local's "routes", no gw) names
	// no gateway in the bridge's result, so "gateway" is left out (Multus
	// writes "<nil>" there: docs/roles/multi.md).
	prim := st[0]
	if prim.Name != primaryName || prim.Interface != "eth0" || !reflect.DeepEqual(prim.IPs, []string{p.Status.PodIP}) ||
		prim.MAC != ifMAC("eth0") || !prim.Default || prim.Gateway != nil {
		t.Errorf("network-status[0] = %+v; want %s, default, on eth0 with %s and its MAC, no gateway", prim, primaryName, p.Status.PodIP)
	}
	// the secondaries' results name no MTU and no default route, so
	// neither does the status (Multus writes the results)
	want := []fullStatus{
		{Name: "default/macnet", Interface: "net1", IPs: []string{macAddr}, MAC: ifMAC("net1"), DNS: map[string]any{}},
		{Name: "default/vethnet", Interface: "net2", IPs: []string{lanPodAddr}, MAC: macs[dev], DNS: map[string]any{}},
	}
	if !reflect.DeepEqual(st[1:], want) {
		t.Errorf("network-status[1:] = %+v\nwant %+v", st[1:], want)
	}
	t.Logf("pod-multi: network-status %s", raw)
	c.poll("pod-multi's AddedInterface events", func() error {
		out, err := c.kubectl("get", "events", "--field-selector", "involvedObject.name=pod-multi,reason=AddedInterface", "-o", "jsonpath={.items[*].message}")
		for _, m := range []string{"Add eth0 [" + p.Status.PodIP + "/", "from " + primaryName, "Add net1 [" + macAddr + "/24] from default/macnet", "Add net2 [" + lanPodAddr + "/24] from default/vethnet"} {
			if err == nil && !strings.Contains(out, m) {
				err = fmt.Errorf("no %q", m)
			}
		}
		if err != nil {
			return fmt.Errorf("events %q: %w", out, err)
		}
		return nil
	})
}

// sameFile reports whether the files a and b hold the same bytes.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	return err == nil && bytes.Equal(da, db)
}
