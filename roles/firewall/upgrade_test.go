package firewall_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/roles/firewall"
	"github.com/cnibox/cnibox/roles/internal/chaintest"
)

// oldOwner is the owner comment cnibox wrote on a pod's rules before the
// maps (and still writes as the elements' comment).
func oldOwner(network string, p chaintest.Pod) string {
	h := sha256.Sum256([]byte(network))
	return "cnibox/" + hex.EncodeToString(h[:4]) + "/" + p.ID + "/eth0"
}

// oldLayout writes what cnibox before the maps wrote for pods under
// iptables' FORWARD: a rule per pod address in CNI-FORWARD, behind the
// jumps to CNI-ADMIN and CNI-ISOLATION.
func oldLayout(t *testing.T, pods map[string]netip.Addr) {
	const jump = "CNI firewall plugin rules"
	for _, c := range []string{"CNI-FORWARD", "CNI-ISOLATION", "CNI-ADMIN"} {
		iptables(t, "-N", c)
	}
	iptables(t, "-I", "FORWARD", "-m", "comment", "--comment", jump, "-j", "CNI-FORWARD")
	iptables(t, "-A", "CNI-FORWARD", "-m", "comment", "--comment", jump, "-j", "CNI-ADMIN")
	iptables(t, "-A", "CNI-FORWARD", "-m", "comment", "--comment", jump, "-j", "CNI-ISOLATION")
	iptables(t, "-A", "CNI-ISOLATION", "-m", "conntrack", "--ctstate", "DNAT", "-m", "comment", "--comment", "cnibox: port-forwarded connections pass", "-j", "RETURN")
	for own, a := range pods {
		ip := a.String()
		iptables(t, "-A", "CNI-FORWARD", "-d", ip, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-m", "comment", "--comment", own, "-j", "ACCEPT")
		iptables(t, "-A", "CNI-FORWARD", "-d", ip, "-m", "conntrack", "--ctstate", "DNAT", "-m", "comment", "--comment", own, "-j", "ACCEPT")
		iptables(t, "-A", "CNI-FORWARD", "-s", ip, "-m", "comment", "--comment", own, "-j", "ACCEPT")
	}
}

// TestUpgradeFromRulePerPod: a node whose pods a and b were added by a
// cnibox that wrote a rule per pod (under iptables' FORWARD DROP) gets the
// new binary. A new pod c is added and reaches b and is reached from a; a's
// DEL removes a's old rules and leaves b's; b's DEL removes the last of
// them, and with them the older layout's CNI-ISOLATION; iptables lists
// everything without a warning throughout.
func TestUpgradeFromRulePerPod(t *testing.T) {
	resetNode(t)
	iptables(t, "-P", "FORWARD", "DROP")
	na, nb, nc := newNet(t, "fwua"), newNet(t, "fwub"), newNet(t, "fwuc")
	pa, prevA, ipA := na.pod("fwua")
	pb, prevB, ipB := nb.pod("fwub")
	pc, prevC, ipC := nc.pod("fwuc")
	oldLayout(t, map[string]netip.Addr{oldOwner("fwua", pa): ipA, oldOwner("fwub", pb): ipB})
	paths(t, path{"old a to old b", pa.Netns, pb.Netns, ipB, true})

	nc.Must(firewall.Role, "ADD", pc, nc.fwConf(prevC, nil))
	paths(t, path{"new c to old b", pc.Netns, pb.Netns, ipB, true}, path{"old a to new c", pa.Netns, pc.Netns, ipC, true})
	if all := iptables(t, "-S"); strings.Contains(all, "incompatible") || strings.Contains(all, "Warning") {
		t.Errorf("iptables -S warns:\n%s", all)
	}

	na.Must(firewall.Role, "DEL", pa, na.fwConf(prevA, nil))
	cf := iptables(t, "-S", "CNI-FORWARD")
	if strings.Contains(cf, ipA.String()+"/") || !strings.Contains(cf, ipB.String()+"/") {
		t.Errorf("CNI-FORWARD after old a's DEL (its rules gone, b's kept):\n%s", cf)
	}
	nb.Must(firewall.Role, "DEL", pb, nb.fwConf(prevB, nil))
	all := iptables(t, "-S")
	if strings.Contains(all, "cnibox/") || strings.Contains(all, "CNI-ISOLATION") {
		t.Errorf("the older layout stays after the DELs of its pods:\n%s", all)
	}
	if strings.Contains(all, "incompatible") || strings.Contains(all, "Warning") {
		t.Errorf("iptables -S warns:\n%s", all)
	}
	nc.Must(firewall.Role, "CHECK", pc, nc.fwConf(prevC, nil))
}
