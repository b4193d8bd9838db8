package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops/nstest"
)

// TestFlannelPluginHandover: flannel's own CNI plugin (flannel-io's, from
// the flanneld build, delegating to the reference bridge and host-local)
// and cnibox's flannel role each delete the pods the other set up on a
// node, as when a node moves from flannel to cnibox and back with pods
// running. Each DEL leaves nothing: the address is free in host-local's
// records, flannel's record of the sandbox (dataDir/ID) is gone, and the
// bridge has no port left.
func TestFlannelPluginHandover(t *testing.T) {
	if nstest.InTestKernel() {
		t.Skip("runs on the host (make test)")
	}
	bin := flanneldPath(t)
	refDir := t.TempDir()
	for name, src := range map[string]string{
		"flannel":    filepath.Join(filepath.Dir(bin), "flannel"),
		"bridge":     "/usr/lib/cni/bridge",
		"host-local": "/usr/lib/cni/host-local",
	} {
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("flannel's side: %v (make deps installs containernetworking-plugins)", err)
		}
		if err := os.Symlink(src, filepath.Join(refDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	c := newCluster(t, 1)
	n := c.nodes[0]
	must(t, os.MkdirAll(filepath.Dir(n.subnetFile), 0o755))
	must(t, os.WriteFile(n.subnetFile, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"), 0o644))
	flannelData, hostLocal := filepath.Join(t.TempDir(), "flannel"), t.TempDir()
	// cniVersion 0.3.1, as kube-flannel.yml's cni-conf.json
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{"cniVersion": "0.3.1", "name": "cbr0", "plugins": [
		{"type": "flannel", "subnetFile": %q, "dataDir": %q, "ipam": {"dataDir": %q},
		 "delegate": {"bridge": "cni0", "hairpinMode": true, "isDefaultGateway": true}}]}`, n.subnetFile, flannelData, hostLocal)))
	must(t, err)
	plugins := map[string]*libcni.CNIConfig{
		"flannel's": libcni.NewCNIConfigWithCacheDir([]string{refDir}, n.cacheDir, nil),
		"cnibox's":  n.cni,
	}

	add := func(by, name string) (*libcni.RuntimeConf, netip.Addr) {
		t.Helper()
		rt := &libcni.RuntimeConf{ContainerID: "handover-" + name, NetNS: nstest.NewNS(t, "ovl-p"), IfName: "eth0"}
		var res *current.Result
		err := n.onNode(func() error {
			r, err := plugins[by].AddNetworkList(context.Background(), list, rt)
			if err == nil {
				res, err = current.NewResultFromResult(r)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s ADD of %s: %v", by, name, err)
		}
		ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
		if _, err := os.Stat(filepath.Join(flannelData, rt.ContainerID)); err != nil {
			t.Errorf("after %s ADD: flannel's record of the sandbox: %v", by, err)
		}
		return rt, ip
	}
	del := func(by string, rt *libcni.RuntimeConf, ip netip.Addr) {
		t.Helper()
		if err := n.onNode(func() error { return plugins[by].DelNetworkList(context.Background(), list, rt) }); err != nil {
			t.Fatalf("%s DEL of %s: %v", by, rt.ContainerID, err)
		}
		if _, err := os.Stat(filepath.Join(hostLocal, "cbr0", ip.String())); !os.IsNotExist(err) {
			t.Errorf("after %s DEL of %s: host-local's record of %s: %v, want it gone", by, rt.ContainerID, ip, err)
		}
		if _, err := os.Stat(filepath.Join(flannelData, rt.ContainerID)); !os.IsNotExist(err) {
			t.Errorf("after %s DEL of %s: flannel's record: %v, want it gone", by, rt.ContainerID, err)
		}
		if ports := bridgePorts(t, n, "cni0"); len(ports) != 0 {
			t.Errorf("after %s DEL of %s: cni0 still has ports %v", by, rt.ContainerID, ports)
		}
	}

	// set up under flannel, deleted after the move to cnibox
	rt, ip := add("flannel's", "a")
	del("cnibox's", rt, ip)
	// set up under cnibox, deleted after the move back
	rt, ip = add("cnibox's", "b")
	del("flannel's", rt, ip)
	if left, _ := os.ReadDir(filepath.Join(hostLocal, "cbr0")); len(left) > 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		if strings.Join(names, " ") != "last_reserved_ip.0 lock" {
			t.Errorf("host-local's records left: %v", names)
		}
	}
}

// bridgePorts are the names of the links enslaved to the bridge br in
// node n's namespace.
func bridgePorts(t *testing.T, n *node, br string) []string {
	t.Helper()
	h := openH(t, n.ns)
	links, err := h.Links()
	must(t, err)
	var idx int
	for _, l := range links {
		if l.Name == br {
			idx = l.Index
		}
	}
	var ports []string
	for _, l := range links {
		if idx != 0 && l.MasterIndex == idx {
			ports = append(ports, l.Name)
		}
	}
	return ports
}
