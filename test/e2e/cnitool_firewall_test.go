package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops/nstest"
)

// cnitool runs cnitool with the plugins of binDir and the conflists of
// confDir. Its result cache (always /var/lib/cni) is a private directory
// bound over that path in a mount namespace of its own, on a tmpfs over
// /var/lib, so nothing of the machine's is written and the path need not
// exist on the machine.
type cnitool struct {
	t                                 *testing.T
	bin, binDir, confDir, cache, args string
}

func (c *cnitool) run(verb, network, netns string) (string, error) {
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs cnitool /var/lib && mkdir /var/lib/cni && mount --bind "$1" /var/lib/cni && shift && exec "$@"`, "sh", c.cache, c.bin, verb, network, netns)
	cmd.Env = append(os.Environ(), "CNI_PATH="+c.binDir, "NETCONFPATH="+c.confDir, "CNI_IFNAME=eth0", "CNI_ARGS="+c.args)
	// The result is stdout; what the plugins say on stderr (host-local's
	// reclaim after a reboot, say) goes with an error only.
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func (c *cnitool) must(verb, network, netns string) string {
	c.t.Helper()
	out, err := c.run(verb, network, netns)
	if err != nil {
		c.t.Fatalf("cnitool %s %s %s: %v\n%s", verb, network, netns, err, out)
	}
	return out
}

// add runs cnitool add and returns the pod's IPv4 address.
func (c *cnitool) add(network, netns string) netip.Addr {
	c.t.Helper()
	out := c.must("add", network, netns)
	var r current.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.IPs) == 0 {
		c.t.Fatalf("cnitool add %s: result %v\n%s", network, err, out)
	}
	a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP)
	return a.Unmap()
}

// fwNetwork is a bridge + firewall conflist with the given ingressPolicy.
func fwNetwork(name, bridge, subnet, policy string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[
	  {"type":"bridge","bridge":%q,"isGateway":true,
	   "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}},
	  {"type":"firewall","ingressPolicy":%q}]}`, name, bridge, subnet, policy)
}

// dropFirewallTables removes cnibox's firewall tables (and iptables-nft's
// filter tables) from the node's namespace at the test's end, so the
// chains that the firewall keeps across DEL do not reach other tests.
func dropFirewallTables(t *testing.T) {
	nft := nstest.RequireProgram(t, "nft", "nftables")
	if !nstest.InPrivateNetns() {
		t.Fatal("not in nstest's private namespace: would change the machine's nftables ruleset")
	}
	t.Cleanup(func() {
		for _, tbl := range [][2]string{{"inet", "cnibox-firewall"}, {"ip", "cnibox-firewall"}, {"ip6", "cnibox-firewall"}, {"ip", "filter"}, {"ip6", "filter"}} {
			exec.Command(nft, "delete", "table", tbl[0], tbl[1]).Run()
		}
	})
}

// checkPaths runs reachable for each {name, from, to, ip, want} at once.
type e2ePath struct {
	name     string
	from, to string
	ip       netip.Addr
	want     bool
}

func checkPaths(t *testing.T, ps ...e2ePath) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]string, len(ps))
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nstest.Probe(t, p.from, p.to, p.ip, p.want); (err == nil) != p.want {
				if p.want {
					errs[i] = fmt.Sprintf("%s (%s): not reached: %v", p.name, p.ip, err)
				} else {
					errs[i] = fmt.Sprintf("%s (%s): reached, want it dropped", p.name, p.ip)
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}

// TestCnitoolFirewall: cnitool (built at go.mod's cni version) drives two
// bridge networks through a plugin dir of cnibox symlinks: "fwsame" with
// ingressPolicy same-bridge, "fwopen" open. A pod of fwopen cannot open a
// connection to fwsame's pods; fwsame's pods reach each other and open
// connections to fwopen's (the way out stays open, docs/roles/firewall.md).
// After cnitool del of every pod no rule of the pods stays, and pods at
// the same addresses on the networks without the firewall reach each
// other: the isolation is gone.
func TestCnitoolFirewall(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	e := newEnv(t)
	dropFirewallTables(t)
	c := &cnitool{t: t, bin: prepared(t, cnitoolEnv), binDir: e.binDir, confDir: t.TempDir(), cache: t.TempDir()}
	must(t, os.WriteFile(filepath.Join(c.confDir, "10-fwsame.conflist"), []byte(fwNetwork("fwsame", "cbxctsame", "10.89.41.0/24", "same-bridge")), 0o644))
	must(t, os.WriteFile(filepath.Join(c.confDir, "20-fwopen.conflist"), []byte(fwNetwork("fwopen", "cbxctopen", "10.89.42.0/24", "open")), 0o644))
	nsA, nsA2, nsB := nstest.NewNS(t, "cta"), nstest.NewNS(t, "cta2"), nstest.NewNS(t, "ctb")
	ipA, ipA2, ipB := c.add("fwsame", nsA), c.add("fwsame", nsA2), c.add("fwopen", nsB)
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			c.run("del", "fwsame", nsA)
			c.run("del", "fwsame", nsA2)
			c.run("del", "fwopen", nsB)
		}
	})
	c.must("check", "fwsame", nsA)
	checkPaths(t,
		e2ePath{"fwopen to same-bridge fwsame", nsB, nsA, ipA, false},
		e2ePath{"fwopen to same-bridge fwsame (second pod)", nsB, nsA2, ipA2, false},
		e2ePath{"fwsame to fwsame on its bridge", nsA2, nsA, ipA, true},
		e2ePath{"same-bridge fwsame to open fwopen", nsA, nsB, ipB, true},
	)

	for _, d := range [][2]string{{"fwsame", nsA}, {"fwsame", nsA2}, {"fwopen", nsB}} {
		c.must("del", d[0], d[1])
	}
	deleted = true
	rules, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, rules)
	}
	for _, a := range []netip.Addr{ipA, ipA2, ipB} {
		if strings.Contains(string(rules), a.String()+" ") {
			t.Errorf("a rule of %s stays after cnitool del:\n%s", a, rules)
		}
	}
	// The same namespaces again at the same addresses, the networks now
	// without the firewall: fwopen reaches fwsame, so no drop of the old
	// attachments was left behind.
	bridgeOnly := func(name, br, subnet string) string {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":true,
		  "ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`, name, br, subnet)
	}
	must(t, os.WriteFile(filepath.Join(c.confDir, "10-fwsame.conflist"), []byte(bridgeOnly("fwsame", "cbxctsame", "10.89.41.0/24")), 0o644))
	must(t, os.WriteFile(filepath.Join(c.confDir, "20-fwopen.conflist"), []byte(bridgeOnly("fwopen", "cbxctopen", "10.89.42.0/24")), 0o644))
	c.args = "IP=" + ipA.String()
	if got := c.add("fwsame", nsA); got != ipA {
		t.Fatalf("fwsame pod again at %s, asked for %s", got, ipA)
	}
	c.args = "IP=" + ipB.String()
	if got := c.add("fwopen", nsB); got != ipB {
		t.Fatalf("fwopen pod again at %s, asked for %s", got, ipB)
	}
	c.args = ""
	t.Cleanup(func() {
		c.run("del", "fwsame", nsA)
		c.run("del", "fwopen", nsB)
	})
	checkPaths(t, e2ePath{"fwopen to fwsame after del", nsB, nsA, ipA, true})
}
