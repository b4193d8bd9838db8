package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cnibox/cnibox/netops"
)

// TestAzureVnetDualStack: azure-vnet with a dual-stack pool (the file
// provider; the Azure host agent lists IPv4 only) gives a pod one address
// per family, and the fabric reaches the pod's IPv6 address knowing only
// the NIC's MAC for it, as for IPv4.
func TestAzureVnetDualStack(t *testing.T) {
	e := newEnv(t)
	const mac = "00:0d:3a:51:c4:90"
	pools := filepath.Join(t.TempDir(), "pools.json")
	if err := os.WriteFile(pools, []byte(`{"interfaces": [
		{"mac": "`+mac+`", "subnet": "10.240.0.0/16", "primary": ["10.240.0.35"], "addresses": ["10.240.0.36-10.240.0.37"]},
		{"mac": "`+mac+`", "subnet": "fd00:240::/64", "primary": ["fd00:240::23"], "addresses": ["fd00:240::24-fd00:240::25"]}
	]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fabric := cloudNode(t, mac, netip.MustParsePrefix("10.240.0.35/16"), netip.MustParsePrefix("10.240.0.1/16"), "azure0")
	fh, err := netops.Open(fabric)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	gw6 := netip.MustParsePrefix("fd00:240::1/64")
	if err := fh.EnsureAddr("eth0", gw6, addrOpts()); err != nil {
		t.Fatal(err)
	}
	if err := hostHandle(t).EnsureAddr("eth0", netip.MustParsePrefix("fd00:240::23/64"), addrOpts()); err != nil {
		t.Fatal(err)
	}
	l := listFromJSON(t, `{"cniVersion": "1.0.0", "name": "metal6", "plugins": [{"type": "azure-vnet", "mode": "bridge",
		"ipam": {"type": "cloud-ipam", "provider": "file", "endpoint": "`+pools+`"}}]}`)

	p := e.newPod("ds")
	res := e.add(l, p)
	ip4, ip6 := podIP(t, res, true), podIP(t, res, false)
	if ip4 != netip.MustParseAddr("10.240.0.36") || ip6 != netip.MustParseAddr("fd00:240::24") {
		t.Fatalf("pod got %v and %v, want 10.240.0.36 and fd00:240::24", ip4, ip6)
	}
	if err := reachable(t, fabric, p.netns, ip6); err != nil {
		t.Fatalf("the fabric cannot reach the pod at %s: %v", ip6, err)
	}
	if got := fabricNeigh(t, fabric, ip6); got != mac {
		t.Errorf("the fabric's neighbour entry for %s is %q, want the NIC's MAC %s", ip6, got, mac)
	}
	if err := reachable(t, p.netns, fabric, gw6.Addr()); err != nil {
		t.Errorf("the pod cannot reach the fabric at %s: %v", gw6.Addr(), err)
	}
	if err := reachable(t, fabric, p.netns, ip4); err != nil {
		t.Errorf("the fabric cannot reach the pod at %s: %v", ip4, err)
	}
	host := hostHandle(t)
	if fp, err := host.NFT().FabricPods(); err != nil || len(fp) != 2 || fp[ip6] == nil {
		t.Errorf("fabric entries %v (%v), want the pod's %s and %s", fp, err, ip4, ip6)
	}
	e.del(l, p)
	e.del(l, p)
	if fp, err := host.NFT().FabricPods(); err != nil || len(fp) != 0 {
		t.Errorf("fabric entries left after DEL: %v, %v", fp, err)
	}
	if got := e.reservations(l.Name); len(got) != 0 {
		t.Errorf("reservations left after DEL: %v", got)
	}
}
