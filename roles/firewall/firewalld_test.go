package firewall_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnibox/cnibox/netops/firewalld/fwdtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// sources lists a zone's sources as firewall-cmd shows them, asking the
// test's firewalld.
func sources(t *testing.T, zone string) []string {
	t.Helper()
	out, err := exec.Command("firewall-cmd", "--zone="+zone, "--list-sources").CombinedOutput()
	if err != nil {
		t.Fatalf("firewall-cmd --zone=%s --list-sources: %v: %s", zone, err, out)
	}
	return strings.Fields(string(out))
}

// nftNamesUntil waits until `nft list ruleset` (but the bridge's source
// check, notSourceCheck) no longer names s and
// returns "", or returns the last listing once d has passed.
func nftNamesUntil(t *testing.T, s string, d time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
		if err == nil && !strings.Contains(notSourceCheck(string(out)), s) {
			return ""
		}
		if time.Now().After(deadline) {
			return string(out)
		}
	}
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestFirewalld runs Debian's firewalld on a private bus, in namespaces of
// its own: with backend left out, the firewall finds firewalld on the bus
// and binds the pod's address to zone trusted (no nftables rules of
// cnibox's), CHECK passes, ADD again is fine, DEL (twice) unbinds it and
// CHECK then fails. firewalldZone picks another zone; a missing zone, and
// an address bound to another zone, are refused with the field named. An
// ingressPolicy adds cnibox's nftables rules, as the reference adds its
// iptables ones whatever the backend.
func TestFirewalld(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", fwdtest.Start(t))
	resetNode(t)
	a := newNet(t, "fwd")
	pa, prev, ip := a.pod("fwd")
	src := ip.String() + "/32"
	conf := a.fwConf(prev, nil)
	for range 2 {
		a.Must(firewall.Role, "ADD", pa, conf)
	}
	if s := sources(t, "trusted"); !has(s, src) {
		t.Fatalf("zone trusted lists %v after ADD, want %s", s, src)
	}
	if out, _ := exec.Command(nstest.RequireProgram(t, "nft", "nftables"), "list", "ruleset").CombinedOutput(); strings.Contains(notSourceCheck(string(out)), ip.String()) {
		t.Errorf("firewalld backend, yet the node's nftables name the pod:\n%s", out)
	}
	a.Must(firewall.Role, "CHECK", pa, conf)
	a.Must(firewall.Role, "STATUS", pa, a.Conf("1.1.0", "firewall", map[string]any{"backend": "firewalld"}, nil))
	a.Must(firewall.Role, "DEL", pa, a.fwConf(nil, map[string]any{"backend": "firewalld"})) // nothing to name: fine
	for range 2 {
		a.Must(firewall.Role, "DEL", pa, conf)
	}
	if s := sources(t, "trusted"); has(s, src) {
		t.Fatalf("zone trusted lists %v after DEL", s)
	}
	if _, err := a.Call(firewall.Role, "CHECK", pa, conf); chaintest.Code(err) != 5 {
		t.Errorf("CHECK after DEL = %v, want code 5", err)
	}

	public := a.fwConf(prev, map[string]any{"backend": "firewalld", "firewalldZone": "public"})
	a.Must(firewall.Role, "ADD", pa, public)
	if s := sources(t, "public"); !has(s, src) {
		t.Fatalf("zone public lists %v after ADD with firewalldZone public, want %s", s, src)
	}
	_, err := a.Call(firewall.Role, "ADD", pa, a.fwConf(prev, map[string]any{"backend": "firewalld"}))
	if chaintest.Code(err) != 5 || !strings.Contains(err.Error(), `"public"`) || !strings.Contains(err.Error(), "firewalldZone") {
		t.Errorf("ADD to trusted with the address in public = %v, want code 5 naming firewalldZone and public", err)
	}
	a.Must(firewall.Role, "DEL", pa, public)
	if s := sources(t, "public"); has(s, src) {
		t.Fatalf("zone public lists %v after DEL", s)
	}

	// ingressPolicy is not firewalld's: cnibox's nftables rules carry it.
	isolated := a.fwConf(prev, map[string]any{"ingressPolicy": "isolated"})
	a.Must(firewall.Role, "ADD", pa, isolated)
	if s := sources(t, "trusted"); !has(s, src) {
		t.Fatalf("zone trusted lists %v after ADD with ingressPolicy isolated, want %s", s, src)
	}
	if out, _ := exec.Command("nft", "list", "ruleset").CombinedOutput(); !strings.Contains(string(out), ip.String()) {
		t.Errorf("ingressPolicy isolated under firewalld: the node's nftables do not name the pod:\n%s", out)
	}
	a.Must(firewall.Role, "CHECK", pa, isolated)
	a.Must(firewall.Role, "DEL", pa, isolated)
	if has(sources(t, "trusted"), src) {
		t.Errorf("DEL left the pod in zone trusted: %v", sources(t, "trusted"))
	}
	// DEL gives the elements a 1 ms timeout (docs/roles/firewall.md): the
	// listing names them until the kernel's next tick.
	if out := nftNamesUntil(t, ip.String(), 10*time.Second); out != "" {
		t.Errorf("DEL left the pod in the node's nftables:\n%s", out)
	}

	_, err = a.Call(firewall.Role, "ADD", pa, a.fwConf(prev, map[string]any{"firewalldZone": "no-such-zone"}))
	if chaintest.Code(err) != 7 || !strings.Contains(err.Error(), "firewalldZone") {
		t.Errorf("ADD with a missing zone = %v, want code 7 naming firewalldZone", err)
	}
}

// notSourceCheck is an `nft list ruleset` without the tables of the bridge
// role's source address check (ipspoofchk), which name the pod's address
// whatever the firewall's backend.
func notSourceCheck(ruleset string) string {
	var keep []string
	for _, table := range strings.Split(ruleset, "table ") {
		if _, rest, ok := strings.Cut(table, " "); ok && strings.HasPrefix(rest, nft.SrcCheckTable+" ") {
			continue
		}
		keep = append(keep, table)
	}
	return strings.Join(keep, "table ")
}
