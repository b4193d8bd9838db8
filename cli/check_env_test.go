package cli

import (
	"bytes"
	"compress/gzip"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles"
)

// writeTree writes files (path -> content) under root, the directories
// of paths ending in "/" only.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func gzipped(t *testing.T, s string) string {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(s))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestCheckNodeEnv: on a node, check looks at what each role's ADD needs
// of the node besides its interfaces (a directory of the test's stands
// for the node's /): the kernel features (from /sys/module, else the
// kernel's config, else /lib/modules' lists; nothing said when none is
// readable), the sockets of the daemons an ADD asks (dhcp's, the agent's
// for whereabouts and multi: missing, not a socket, nobody listening), the
// files (flannel's subnet.env a warning: the agent writes it at its
// start; host-device's PCI device an error). Off a node nothing is looked
// at. (Before, none of it was: each case said ok.)
func TestCheckNodeEnv(t *testing.T) {
	bin := checkBinDir(t)
	check := func(ck checker, plugin string) []checkFinding {
		t.Helper()
		path := filepath.Join(t.TempDir(), "10-env.conflist")
		conf := `{"cniVersion": "1.0.0", "name": "envnet", "plugins": [` + plugin + `]}`
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return ck.paths([]string{path}).Files[0].Findings
	}
	node := func(root string) checker {
		return checker{reg: roles.Registry(), binDirs: []string{bin}, env: &nodeEnv{root: root}}
	}
	static := `, "ipam": {"type": "static", "addresses": [{"address": "192.0.2.10/24"}]}}`
	wantErr := func(what string, fs []checkFinding, path, text string) {
		t.Helper()
		if e := findingAt(fs, sevError, "plugins[0]."+path); len(e) != 1 || !strings.Contains(e[0].Message, text) || e[0].Fix == "" {
			t.Errorf("%s: want one error at %s saying %q with a fix; findings %+v", what, path, text, fs)
		}
	}
	wantNone := func(what string, fs []checkFinding) {
		t.Helper()
		if len(fs) != 0 {
			t.Errorf("%s: %+v, want none", what, fs)
		}
	}

	// The kernel, by its config (/proc/config.gz); ipvlan loaded shows in /sys/module.
	k := t.TempDir()
	writeTree(t, k, map[string]string{
		"proc/sys/kernel/osrelease": "6.1.0-test\n",
		"proc/config.gz":            gzipped(t, "CONFIG_BRIDGE=y\nCONFIG_VETH=y\nCONFIG_MACVLAN=m\n# CONFIG_VLAN_8021Q is not set\nCONFIG_NF_TABLES=m\n"),
		"sys/module/ipvlan/":        "",
	})
	wantNone("bridge, built in", check(node(k), `{"type": "bridge", "bridge": "cbx-env0"`+static))
	wantNone("macvlan, a module", check(node(k), `{"type": "macvlan", "master": "eth0"`+static))
	wantNone("ipvlan, loaded", check(node(k), `{"type": "ipvlan", "master": "eth0"`+static))
	wantErr("vlan, not set", check(node(k), `{"type": "vlan", "master": "eth0", "vlanId": 5`+static), "type", "CONFIG_VLAN_8021Q is not set in /proc/config.gz")
	wantErr("dummy, not in the config", check(node(k), `{"type": "dummy"`+static), "type", "this kernel (6.1.0-test) has no dummy")

	// No config: the module lists of /lib/modules/RELEASE.
	m := t.TempDir()
	writeTree(t, m, map[string]string{
		"proc/sys/kernel/osrelease":              "6.1.0-test\n",
		"lib/modules/6.1.0-test/modules.dep":     "kernel/drivers/net/dummy.ko:\n",
		"lib/modules/6.1.0-test/modules.builtin": "kernel/net/bridge/bridge.ko\n",
	})
	wantNone("dummy, installed", check(node(m), `{"type": "dummy"`+static))
	wantErr("macvlan, in no list", check(node(m), `{"type": "macvlan", "master": "eth0"`+static), "type", "no macvlan in /lib/modules/6.1.0-test")
	// Nothing readable: nothing said.
	wantNone("a kernel that says nothing", check(node(t.TempDir()), `{"type": "macvlan", "master": "eth0"`+static))

	// Sockets: dhcp's daemon.
	s := t.TempDir()
	writeTree(t, s, map[string]string{"proc/config.gz": gzipped(t, "CONFIG_BRIDGE=y\nCONFIG_VETH=y\n")})
	dhcp := `{"type": "bridge", "bridge": "cbx-env0", "ipam": {"type": "dhcp"}}`
	wantErr("dhcp, no daemon", check(node(s), dhcp), "ipam.daemonSocketPath", "the node has no /run/cni/dhcp.sock")
	writeTree(t, s, map[string]string{"run/cni/dhcp.sock": "x"})
	wantErr("dhcp, a file", check(node(s), dhcp), "ipam.daemonSocketPath", "is a regular file, no socket")
	os.Remove(filepath.Join(s, "run/cni/dhcp.sock"))
	ln, err := net.Listen("unix", filepath.Join(s, "run/cni/dhcp.sock"))
	if err != nil {
		t.Fatal(err)
	}
	wantNone("dhcp, a daemon listening", check(node(s), dhcp))
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	wantErr("dhcp, a socket nobody listens on", check(node(s), dhcp), "ipam.daemonSocketPath", "nothing listens on /run/cni/dhcp.sock")
	// cnibox-agent's, for whereabouts (its default) and multi (when set).
	wantErr("whereabouts, no agent", check(node(s), `{"type": "bridge", "bridge": "cbx-env0", "ipam": {"type": "whereabouts", "range": "10.99.7.0/24"}}`),
		"ipam.agentSocket", "the node has no /run/cnibox/agent.sock")
	wantErr("multi, no agent", check(node(s), `{"type": "multi", "agentSocket": "/run/cbx/agent.sock", "delegates": [`+chainBridge+`]}`),
		"agentSocket", "the node has no /run/cbx/agent.sock")

	// Files: flannel's subnet.env (a warning), host-device's PCI device.
	if w := findingAt(check(node(s), `{"type": "flannel"}`), sevWarning, "plugins[0].subnetFile"); len(w) != 1 || !strings.Contains(w[0].Message, "/run/flannel/subnet.env") {
		t.Errorf("flannel without subnet.env: want a warning at subnetFile; got %+v", w)
	}
	writeTree(t, s, map[string]string{"run/flannel/subnet.env": "FLANNEL_NETWORK=10.244.0.0/16\n", "sys/bus/pci/devices/0000:00:05.0/": ""})
	wantNone("flannel with subnet.env", check(node(s), `{"type": "flannel"}`))
	wantErr("host-device, no such PCI device", check(node(s), `{"type": "host-device", "pciBusID": "0000:00:06.0"`+static), "pciBusID", "/sys/bus/pci/devices/0000:00:06.0")
	wantNone("host-device, its PCI device there", check(node(s), `{"type": "host-device", "pciBusID": "0000:00:05.0"`+static))

	// Off a node: nothing looked at.
	off := checker{reg: roles.Registry(), binDirs: []string{bin}, offNode: "not root"}
	wantNone("dhcp off a node", check(off, dhcp))
	wantNone("vlan off a node", check(off, `{"type": "vlan", "master": "eth0", "vlanId": 5`+static))
}
