//go:build kube

package node

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The device handoff's pieces: the resource the test's device plugin
// advertises, its devices (veths on the node whose peers plug into a
// bridge with the LAN's gateway), and the NAD that names the resource.
const (
	vethResource = "cnibox.example/veth"
	lanGateway   = "192.168.77.1"
	lanPodAddr   = "192.168.77.10"
)

var vethDevices = []string{"cbxveth0", "cbxveth1"}

// vethNAD is a host-device network with static addresses; its
// resourceName is the device plugin's resource, so the device comes from
// the kubelet's allocation: runtimeConfig.deviceID, which host-device
// takes as an interface name (the capability is declared: multi's
// pciBusID is for PCI addresses only).
var vethNAD = `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition",
"metadata":{"name":"vethnet","namespace":"default","annotations":{"k8s.v1.cni.cncf.io/resourceName":"` + vethResource + `"}},
"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"name\":\"vethnet\",\"type\":\"host-device\",\"capabilities\":{\"deviceID\":true},\"ipam\":{\"type\":\"static\",\"addresses\":[{\"address\":\"` + lanPodAddr + `/24\"}]}}"}}`

// TestKubeNodeMultus is the device handoff on the real node, as Multus
// does it with an SR-IOV device plugin: a device plugin advertises two
// veths of the node as cnibox.example/veth; a pod requests one and names
// a NAD with that resourceName, with default-route through it; the
// kubelet allocates a device, multi finds it through the agent (the
// kubelet's pod-resources API), host-device moves it into the pod as net1,
// the pod's default route goes through net1, and network-status says so
// field by field. Deleting the pod gives the device back to the node.
func TestKubeNodeMultus(t *testing.T) {
	imageTar := env(t, "CNIBOX_IMAGE_TAR", "make image's archive (bin/cnibox-image.tar)")
	manifest := env(t, "CNIBOX_MANIFEST", "make image's manifest (bin/cnibox.yaml)")
	n := startNode(t)
	d := render(t, n, manifest)
	bb := filepath.Join(n.dir, "busybox.tar")
	writeBusyboxImage(t, bb, busyboxRef)
	n.ctr("images", "import", bb)
	n.ctr("images", "import", imageTar)
	install(t, n, d)
	cidr := podCIDR(t, n, d)

	macs := vethLAN(t, n)
	plugin := startVethPlugin(t, n, vethResource, vethDevices...)
	waitAllocatable(t, n, nodeName)

	switchToMulti(t, n, d)
	n.apply(vethNAD)

	networks := `[{"name":"vethnet","default-route":["` + lanGateway + `"]}]`
	n.apply(devicePod(t, "pod-dev", map[string]string{"k8s.v1.cni.cncf.io/networks": networks}))
	n.must("wait", "--for=condition=Ready", n.timeout(), "pod/pod-dev")

	// The kubelet allocated one device; the pod's net1 is that device.
	got := plugin.Allocated()
	if len(got) != 1 || macs[got[0]] == "" {
		t.Fatalf("the kubelet allocated %v, want one of %v", got, vethDevices)
	}
	dev := got[0]
	if env := n.must("exec", "pod-dev", "--", "env"); !slices.Contains(strings.Fields(env), "CNIBOX_VETH="+dev) {
		t.Errorf("the pod's environment lacks CNIBOX_VETH=%s (the plugin's Allocate):\n%s", dev, env)
	}
	podMAC := strings.TrimSpace(n.must("exec", "pod-dev", "--", "cat", "/sys/class/net/net1/address"))
	if podMAC != macs[dev] {
		t.Fatalf("the pod's net1 has MAC %s, want %s (the allocated %s)", podMAC, macs[dev], dev)
	}
	if out, err := n.onNode("ip", "link", "show", dev); err == nil {
		t.Errorf("the node still has the allocated %s: %s", dev, out)
	}
	for _, other := range vethDevices {
		if other != dev {
			if _, err := n.onNode("ip", "link", "show", other); err != nil {
				t.Errorf("the device the kubelet did not allocate (%s) left the node: %v", other, err)
			}
		}
	}
	if out := n.must("exec", "pod-dev", "--", "ip", "-o", "-4", "addr", "show", "dev", "net1"); !strings.Contains(out, " "+lanPodAddr+"/24 ") {
		t.Errorf("the pod's net1 lacks %s/24: %s", lanPodAddr, out)
	}

	// default-route: the only default route is through net1.
	routes := n.must("exec", "pod-dev", "--", "ip", "-4", "route", "show", "default")
	if lines := strings.Split(strings.TrimSpace(routes), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "default via "+lanGateway+" dev net1") {
		t.Errorf("the pod's default routes:\n%s\nwant only default via %s dev net1", routes, lanGateway)
	}
	n.must("exec", "pod-dev", "--", "ping", "-c", "1", "-W", "5", lanGateway)

	// network-status, field by field, as Multus writes it.
	p := getPod(t, n, "pod-dev")
	raw := p.Annotations["k8s.v1.cni.cncf.io/network-status"]
	var st []fullStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil || len(st) != 2 {
		t.Fatalf("network-status: want 2 entries, got %q (%v)", raw, err)
	}
	eth0MAC := strings.TrimSpace(n.must("exec", "pod-dev", "--", "cat", "/sys/class/net/eth0/address"))
	prim := st[0]
	if prim.Name == "" || prim.Interface != "eth0" || !reflect.DeepEqual(prim.IPs, []string{p.Status.PodIP}) || prim.MAC != eth0MAC || !prim.Default || prim.DeviceInfo != nil {
		t.Errorf("network-status[0] = %+v; want the primary network, default, on eth0 with %s and MAC %s", prim, p.Status.PodIP, eth0MAC)
	}
	if len(prim.Gateway) != 1 || !cidr.Contains(netip.MustParseAddr(prim.Gateway[0])) {
		t.Errorf("network-status[0].gateway = %v, want the pod network's gateway in %s", prim.Gateway, cidr)
	}
	// host-device's result, as the reference's, names no MTU and no
	// default route: neither does the status (Multus writes the result).
	want := fullStatus{Name: "default/vethnet", Interface: "net1", IPs: []string{lanPodAddr}, MAC: macs[dev], DNS: map[string]any{}}
	if s := st[1]; !reflect.DeepEqual(s, want) {
		t.Errorf("network-status[1] = %+v\nwant %+v", s, want)
	}
	t.Logf("pod-dev: device %s as net1; network-status %s", dev, raw)

	// The AddedInterface event Multus records.
	n.poll("pod-dev's AddedInterface events", func() error {
		out, err := n.kubectl("get", "events", "--field-selector", "involvedObject.name=pod-dev,reason=AddedInterface", "-o", "jsonpath={.items[*].message}")
		if err != nil || !strings.Contains(out, "net1") || !strings.Contains(out, "default/vethnet") {
			return fmt.Errorf("events: %q %v", out, err)
		}
		return nil
	})

	// Deleting the pod gives the device back to the node as it was.
	n.must("delete", "pod", "pod-dev", "--wait", n.timeout())
	n.poll("the device back on the node", func() error {
		if mac, err := n.nodeMAC(dev); err != nil || mac != macs[dev] {
			return fmt.Errorf("%s on the node: MAC %q %v, want %s", dev, mac, err, macs[dev])
		}
		return nil
	})
}

// vethLAN makes the LAN on node n: a bridge with the gateway's address,
// and each of vethDevices a veth whose peer is a port of it. It returns
// the devices' MACs.
func vethLAN(t *testing.T, n *node) map[string]string {
	t.Helper()
	macs := map[string]string{}
	n.onNodeMust("ip", "link", "add", "cbxlan", "type", "bridge")
	n.onNodeMust("ip", "addr", "add", lanGateway+"/24", "dev", "cbxlan")
	n.onNodeMust("ip", "link", "set", "cbxlan", "up")
	for i, dev := range vethDevices {
		peer := "cbxpeer" + strconv.Itoa(i)
		n.onNodeMust("ip", "link", "add", dev, "type", "veth", "peer", "name", peer)
		n.onNodeMust("ip", "link", "set", peer, "master", "cbxlan", "up")
		mac, err := n.nodeMAC(dev)
		if err != nil {
			t.Fatal(err)
		}
		macs[dev] = mac
	}
	return macs
}

// waitAllocatable waits until the node object name offers every device
// of vethResource (the device plugin registered, the kubelet reported).
func waitAllocatable(t *testing.T, n *node, name string) {
	t.Helper()
	n.poll("the node's allocatable "+vethResource, func() error {
		var nd corev1.Node
		out, err := n.kubectl("get", "node", name, "-o", "json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &nd)
		}
		if err != nil {
			return err
		}
		if q, ok := nd.Status.Allocatable[vethResource]; !ok || q.Value() != int64(len(vethDevices)) {
			return fmt.Errorf("allocatable %s = %v", vethResource, nd.Status.Allocatable[vethResource])
		}
		return nil
	})
}

// fullStatus is a network-status entry with every field Multus writes.
type fullStatus struct {
	Name       string          `json:"name"`
	Interface  string          `json:"interface,omitempty"`
	IPs        []string        `json:"ips,omitempty"`
	MAC        string          `json:"mac,omitempty"`
	MTU        int             `json:"mtu,omitempty"`
	Default    bool            `json:"default,omitempty"`
	DNS        map[string]any  `json:"dns"`
	DeviceInfo json.RawMessage `json:"device-info,omitempty"`
	Gateway    []string        `json:"gateway,omitempty"`
}

// devicePod is podManifest's pod requesting one device of vethResource.
func devicePod(t *testing.T, name string, annotations map[string]string) string {
	var p corev1.Pod
	if err := json.Unmarshal([]byte(podManifest(name, annotations)), &p); err != nil {
		t.Fatal(err)
	}
	one := corev1.ResourceList{vethResource: resource.MustParse("1")}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: one, Requests: one}
	out, _ := json.Marshal(p)
	return string(out)
}

// onNodeMust is onNode that fails the test.
func (n *node) onNodeMust(args ...string) string {
	n.t.Helper()
	out, err := n.onNode(args...)
	if err != nil {
		n.t.Fatalf("on the node: %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// nodeMAC is the MAC of the node's interface dev (the node's /sys is the
// machine's sysfs: ask its network namespace).
func (n *node) nodeMAC(dev string) (string, error) {
	out, err := n.onNode("ip", "-o", "link", "show", "dev", dev)
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	if i := slices.Index(f, "link/ether"); i >= 0 && i+1 < len(f) {
		return f[i+1], nil
	}
	return "", fmt.Errorf("no MAC in %q", out)
}
