package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles"
)

// TestCheckNodeInterfaces: on a node, the interfaces the configs name are
// looked for there (here a namespace of the test's, standing for the
// node): a macvlan, ipvlan or vlan master that is not there is an error
// (every ADD fails), one that is down a warning, one in the pod
// (linkInContainer) is not looked for; a host-device's device that is not
// there is a warning (a pod may hold it). Off a node nothing is looked
// for. (At 48e1376 nothing was looked for.)
func TestCheckNodeInterfaces(t *testing.T) {
	node := nstest.NewNS(t, "cbxchk")
	host, err := netops.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	bin := checkBinDir(t)
	check := func(ck checker, plugin string) []checkFinding {
		t.Helper()
		path := filepath.Join(t.TempDir(), "10-node.conflist")
		conf := `{"cniVersion": "1.0.0", "name": "nodenet", "plugins": [` + plugin + `]}`
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return ck.paths([]string{path}).Files[0].Findings
	}
	ipam := `, "ipam": {"type": "static", "addresses": [{"address": "192.0.2.10/24"}]}}`
	on := checker{reg: roles.Registry(), binDirs: []string{bin}, host: host}
	for _, typ := range []string{"macvlan", "ipvlan", "vlan"} {
		extra := ""
		if typ == "vlan" {
			extra = `, "vlanId": 100`
		}
		fs := check(on, `{"type": "`+typ+`", "master": "cbxnosuch0"`+extra+ipam)
		if e := findingAt(fs, sevError, "plugins[0].master"); len(e) != 1 || !strings.Contains(e[0].Message, `no interface "cbxnosuch0"`) {
			t.Errorf("%s with a master the node lacks: want an error at plugins[0].master; findings %+v", typ, fs)
		}
		if fs := check(on, `{"type": "`+typ+`", "master": "cbxnosuch0", "linkInContainer": true`+extra+ipam); len(fs) != 0 {
			t.Errorf("%s with linkInContainer: %+v, want none (the master is the pod's)", typ, fs)
		}
		off := checker{reg: roles.Registry(), binDirs: []string{bin}, offNode: "not root"}
		if fs := check(off, `{"type": "`+typ+`", "master": "cbxnosuch0"`+extra+ipam); len(fs) != 0 {
			t.Errorf("%s off a node: %+v, want none", typ, fs)
		}
	}
	if err := host.SetLinkDown("lo"); err != nil {
		t.Fatal(err)
	}
	if w := findingAt(check(on, `{"type": "macvlan", "master": "lo"`+ipam), sevWarning, "plugins[0].master"); len(w) != 1 || !strings.Contains(w[0].Fix, "ip link set lo up") {
		t.Errorf("a master that is down: want a warning with the fix; got %+v", w)
	}
	if err := host.SetLinkUp("lo"); err != nil {
		t.Fatal(err)
	}
	if fs := check(on, `{"type": "macvlan", "master": "lo"`+ipam); len(fs) != 0 {
		t.Errorf("a master that is there and up: %+v, want none", fs)
	}
	fs := check(on, `{"type": "host-device", "device": "cbxnosuch0"`+ipam)
	if w := findingAt(fs, sevWarning, "plugins[0].device"); len(w) != 1 || len(fs) != 1 {
		t.Errorf("host-device with a device the node lacks: want one warning at plugins[0].device; findings %+v", fs)
	}
}
