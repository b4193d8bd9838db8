package hostdevice

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// fakeSys points sysRoot at a sysfs tree of the test's: PCI device
// 0000:00:05.0 (at kernelpath /sys/devices/pci0000:00/0000:00:05.0) with
// netdev dev0, virtio PCI device 0000:00:06.0 with dev1, auxiliary device
// mlx5_core.sf.2 with dev2, and PCI device 0000:00:07.0 bound to vfio-pci.
func fakeSys(t *testing.T) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{
		"devices/pci0000:00/0000:00:05.0/net/dev0",
		"bus/pci/devices/0000:00:06.0/virtio1/net/dev1",
		"bus/auxiliary/devices/mlx5_core.sf.2/net/dev2",
		"bus/pci/devices/0000:00:07.0",
		"bus/pci/drivers/vfio-pci",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{
		"bus/pci/devices/0000:00:05.0":        "../../../devices/pci0000:00/0000:00:05.0",
		"bus/pci/devices/0000:00:07.0/driver": "../../drivers/vfio-pci",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	old := sysRoot
	sysRoot = root
	t.Cleanup(func() { sysRoot = old })
}

// TestNamedBy: each way to name the device finds the one the reference
// would, and DEL gives it back.
func TestNamedBy(t *testing.T) {
	fakeSys(t)
	n := newNode(t)
	devs := map[string]netops.DeviceState{}
	for _, d := range []string{"dev0", "dev1", "dev2"} {
		devs[d] = newDevice(t, d)
	}
	for _, tc := range []struct{ name, extra, want string }{
		{"hwaddr", `,"hwaddr":"` + strings.ToUpper(devs["dev1"].MAC.String()) + `"`, "dev1"},
		{"kernelpath", `,"kernelpath":"/sys/devices/pci0000:00/0000:00:05.0"`, "dev0"},
		{"pciBusID", `,"pciBusID":"0000:00:05.0"`, "dev0"},
		{"virtio pciBusID", `,"pciBusID":"0000:00:06.0"`, "dev1"},
		{"deviceID over pciBusID", `,"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"0000:00:06.0"}`, "dev1"},
		{"auxiliary deviceID", `,"pciBusID":"0000:00:05.0","runtimeConfig":{"deviceID":"mlx5_core.sf.2"}`, "dev2"},
		{"device over deviceID", `,"device":"dev0","runtimeConfig":{"deviceID":"mlx5_core.sf.2"}`, "dev0"},
		// multi passes a device plugin's ID as deviceID and pciBusID both.
		{"interface deviceID", `,"pciBusID":"dev1","runtimeConfig":{"deviceID":"dev1"}`, "dev1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := n.NewPod("by")
			c := netConf("1.0.0", tc.extra, v4)
			res := roletest.Result(t, n.Must(Role, "ADD", p, c), "1.0.0")
			if want := devs[tc.want].MAC.String(); res.Interfaces[0].Mac != want {
				t.Errorf("moved the device with MAC %s, want %s (%s)", res.Interfaces[0].Mac, want, tc.want)
			}
			n.Must(Role, "DEL", p, c)
			backAsItWas(t, devs[tc.want])
		})
	}
	n.Empty("hdnet")
}

// TestDPDK: a PCI device bound to a userspace driver has no netdev: ADD
// hands out the addresses with the interface's name and sandbox only, and
// holds the device against a second attachment; CHECK and DEL pass.
func TestDPDK(t *testing.T) {
	fakeSys(t)
	n := newNode(t)
	p, q := n.NewPod("dpdk"), n.NewPod("dpdk")
	c := netConf("1.1.0", `,"pciBusID":"0000:00:07.0"`, v4)
	out := n.Must(Role, "ADD", p, c)
	res := roletest.Result(t, out, "1.1.0")
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Mac != "" || len(res.IPs) != 1 {
		t.Errorf("result = %+v", res)
	}
	if _, err := roletest.Open(t, p.Netns).LinkByName("eth0"); err == nil {
		t.Error("a DPDK device put an eth0 in the pod")
	}
	if eps := n.Endpoints("hdnet"); len(eps) != 1 || eps[0].Extra["dpdk"] != "true" || eps[0].Extra["pciBusID"] != "0000:00:07.0" {
		t.Errorf("records = %+v", eps)
	}
	if _, err := n.Call(Role, "ADD", q, c); roletest.Code(err) != 7 || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second ADD of the DPDK device: %v, want code 7 (in use)", err)
	}
	n.Must(Role, "CHECK", p, roletest.WithPrev(t, c, out))
	for range 2 {
		n.Must(Role, "DEL", p, c)
	}
	n.Empty("hdnet")
}

// TestBadInput: bad input gets the code of its kind and a message naming
// the field; the device stays on the node as it was and nothing is left.
func TestBadInput(t *testing.T) {
	fakeSys(t)
	n := newNode(t)
	st := newDevice(t, "dev0")
	p := n.NewPod("bad")
	for _, tc := range []struct {
		name, conf string
		code       uint
		says       string
	}{
		{"no device", string(netConf("1.0.0", "", v4)), 7, `"device"`},
		{"device name", string(netConf("1.0.0", `,"device":"a/b"`, v4)), 7, `"device"`},
		{"device missing", string(netConf("1.0.0", `,"device":"nic9"`, v4)), 7, `"device"`},
		{"hwaddr", string(netConf("1.0.0", `,"hwaddr":"zz"`, v4)), 7, `"hwaddr"`},
		{"hwaddr missing", string(netConf("1.0.0", `,"hwaddr":"0a:00:00:00:62:99"`, v4)), 7, `"hwaddr"`},
		{"kernelpath outside", string(netConf("1.0.0", `,"kernelpath":"/etc/devices/x"`, v4)), 7, `"kernelpath"`},
		{"kernelpath dots", string(netConf("1.0.0", `,"kernelpath":"/sys/devices/../x"`, v4)), 7, `"kernelpath"`},
		{"kernelpath empty", string(netConf("1.0.0", `,"kernelpath":"/sys/devices/pci0000:00"`, v4)), 7, `"kernelpath"`},
		{"pciBusID", string(netConf("1.0.0", `,"pciBusID":"../../x"`, v4)), 7, `"pciBusID"`},
		{"pciBusID missing", string(netConf("1.0.0", `,"pciBusID":"0000:00:09.0"`, v4)), 7, `"pciBusID"`},
		{"deviceID", string(netConf("1.0.0", `,"runtimeConfig":{"deviceID":"0000:00:09.0"}`, v4)), 7, "runtimeConfig.deviceID"},
		{"deviceID no interface", string(netConf("1.0.0", `,"runtimeConfig":{"deviceID":"nic9"}`, v4)), 7, "nor an interface of the node"},
		{"deviceID no name", string(netConf("1.0.0", `,"runtimeConfig":{"deviceID":"sixteen-chars-xx"}`, v4)), 7, "nor an interface name"},
		{"broken JSON", `{"cniVersion":"1.0.0","name":"hdnet","type":"host-device",`, 6, ""},
		{"spec version 0.2.0", string(netConf("0.2.0", `,"device":"dev0"`, v4)), 1, ""},
		{"bad subnet", string(netConf("1.0.0", `,"device":"dev0"`, `[[{"subnet":"10.62.0.0/33"}]]`)), 7, "subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Call(Role, "ADD", p, []byte(tc.conf))
			if roletest.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ADD: code %d, %v; want code %d saying %s", roletest.Code(err), err, tc.code, tc.says)
			}
		})
	}
	c := netConf("1.0.0", `,"device":"dev0"`, v4)
	if _, err := n.Call(Role, "ADD", p, c, "CNI_NETNS", "/run/netns/no-such-pod"); roletest.Code(err) != 3 {
		t.Errorf("ADD into a missing netns: %v, want code 3", err)
	}
	pod := roletest.Open(t, p.Netns)
	if _, _, err := pod.EnsureVeth(netops.VethOpts{HostName: "eth0", PeerName: "eth0p", Peer: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Call(Role, "ADD", p, c); roletest.Code(err) != 101 {
		t.Errorf("ADD with eth0 taken: %v, want code 101", err)
	}
	backAsItWas(t, st)
	n.Empty("hdnet")
}
