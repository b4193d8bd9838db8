package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// The agent writes what flanneld writes: the fixture is flannel's file for
// the node that leased 10.244.0.0/24 of 10.244.0.0/16.
func TestSubnetFile(t *testing.T) {
	want, err := os.ReadFile("testdata/subnet.env")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run", "flannel", "subnet.env")
	env := SubnetEnv{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.0.0/24"), MTU: 1450, IPMasq: true}
	for range 2 {
		if err := WriteSubnetFile(path, env); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("subnet file:\n%s\nwant flannel's:\n%s", got, want)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	sn4, sn6, err := readPreviousSubnets(path)
	if err != nil || sn4 != netip.MustParsePrefix("10.244.0.0/24") || sn6.IsValid() {
		t.Errorf("readPreviousSubnets = %v, %v, %v", sn4, sn6, err)
	}
	if sn4, _, err := readPreviousSubnets(filepath.Join(t.TempDir(), "none")); err != nil || sn4.IsValid() {
		t.Errorf("readPreviousSubnets(missing) = %v, %v", sn4, err)
	}

	dual := SubnetEnv{Network: netip.MustParsePrefix("10.244.0.0/16"), Subnet: netip.MustParsePrefix("10.244.3.0/24"),
		Network6: netip.MustParsePrefix("fd00:10::/56"), Subnet6: netip.MustParsePrefix("fd00:10:0:3::/64"), MTU: 1430}
	if got := string(dual.Bytes()); got != "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:10::/56\nFLANNEL_IPV6_SUBNET=fd00:10:0:3::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n" {
		t.Errorf("dual stack subnet file:\n%s", got)
	}
}
