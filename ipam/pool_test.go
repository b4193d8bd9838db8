package ipam

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// nicPool is the Azure fixture's pool: 10.240.0.36-.65 of 10.240.0.0/16.
func nicPool() Pool {
	p := Pool{Subnet: prefix("10.240.0.0/16"), Owner: "NIC 00:0d:3a:51:c4:90", What: "secondary IPs", Fix: "assign more"}
	for i := 36; i <= 65; i++ {
		p.Addrs = append(p.Addrs, addr(fmt.Sprintf("10.240.0.%d", i)))
	}
	return p
}

func allocPools(t *testing.T, s *store.Store, cid string, pools []Pool, mod ...func(*Request)) ([]Allocation, error) {
	t.Helper()
	req := Request{ContainerID: cid, IfName: "eth0"}
	for _, m := range mod {
		m(&req)
	}
	var out []Allocation
	err := s.IPAM("net", func(tx *store.IPAMTx) (err error) {
		out, err = AllocatePools(tx, req, "pools", pools)
		return err
	})
	return out, err
}

func TestPoolSets(t *testing.T) {
	p := Pool{Subnet: prefix("10.0.0.0/24"), Addrs: []netip.Addr{
		addr("10.0.0.9"), addr("10.0.0.5"), addr("10.0.0.6"), addr("10.0.0.5"), // unsorted, duplicate
		addr("10.0.0.1"), addr("10.0.0.0"), addr("10.0.0.255"), // gateway, network, broadcast: dropped
		addr("10.0.0.7"),
	}}
	p6 := Pool{Subnet: prefix("fd00::/64"), Addrs: []netip.Addr{addr("fd00::10")}}
	sets, members, err := PoolSets("pools", []Pool{p6, p})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sets[0].String(), "10.0.0.5-10.0.0.7, 10.0.0.9-10.0.0.9"; got != want {
		t.Errorf("IPv4 set %q, want %q", got, want)
	}
	if got, want := sets[1].String(), "fd00::10-fd00::10"; got != want {
		t.Errorf("IPv6 set %q, want %q", got, want)
	}
	if !reflect.DeepEqual(members, [][]int{{1}, {0}}) {
		t.Errorf("members %v", members)
	}
	for _, tt := range []struct {
		name  string
		pools []Pool
		words []string
	}{
		{"outside", []Pool{{Subnet: prefix("10.0.0.0/24"), Addrs: []netip.Addr{addr("10.0.1.5")}}}, []string{`"pools[0]"`, "10.0.1.5", "outside"}},
		{"host bits", []Pool{{Subnet: prefix("10.0.0.5/24")}}, []string{"host bits"}},
		{"no subnet", []Pool{{}}, []string{`"pools[0].subnet"`}},
		{"same address twice", []Pool{
			{Subnet: prefix("10.0.0.0/24"), Addrs: []netip.Addr{addr("10.0.0.5")}},
			{Subnet: prefix("10.0.0.0/24"), Addrs: []netip.Addr{addr("10.0.0.5")}},
		}, []string{"overlaps"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := PoolSets("pools", tt.pools)
			checkErr(t, err, 7, tt.words...)
		})
	}
}

func TestAllocatePoolsExhaustion(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pools := []Pool{nicPool()}
	seen := map[netip.Addr]bool{}
	for i := range 30 {
		out, err := allocPools(t, s, fmt.Sprint("c", i), pools)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		a := out[0]
		if a.Addr.Bits() != 16 || a.Gateway != addr("10.240.0.1") || seen[a.Addr.Addr()] {
			t.Fatalf("pod %d got %+v", i, a)
		}
		seen[a.Addr.Addr()] = true
	}
	_, err = allocPools(t, s, "c30", pools)
	checkErr(t, err, cniplug.CodePoolExhausted, `network "net"`, "all 30 secondary IPs of NIC 00:0d:3a:51:c4:90 in 10.240.0.0/16 are in use", "assign more")

	// STATUS says the same with code 50.
	s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		checkErr(t, PoolsReady(tx, "net", "pools", pools), cniplug.CodeNotReady, "all 30 secondary IPs")
		return nil
	})
	// A retry of a pod that holds an address still works when full.
	if out, err := allocPools(t, s, "c3", pools); err != nil || !seen[out[0].Addr.Addr()] {
		t.Errorf("retry of c3: %v, %v", out, err)
	}
	// Releasing one makes it the next one handed out.
	var freed []store.Reservation
	s.IPAM("net", func(tx *store.IPAMTx) (err error) { freed, err = Release(tx, "c7", "eth0"); return err })
	out, err := allocPools(t, s, "c31", pools)
	if err != nil || out[0].Addr.Addr() != freed[0].Addr {
		t.Errorf("after release got %v, %v; want %s", out, err, freed[0].Addr)
	}
	s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		if err := PoolsReady(tx, "net", "pools", pools); cniplug.CodeOf(err) != cniplug.CodeNotReady {
			t.Errorf("full again: PoolsReady = %v", err)
		}
		return nil
	})
}

func TestAllocatePoolsOrder(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Two NICs, addresses not contiguous.
	a := Pool{Subnet: prefix("10.1.0.0/24"), Addrs: []netip.Addr{addr("10.1.0.20"), addr("10.1.0.10")}, Owner: "NIC a"}
	b := Pool{Subnet: prefix("10.2.0.0/24"), Addrs: []netip.Addr{addr("10.2.0.30")}, Owner: "NIC b"}
	pools := []Pool{a, b}
	var got []string
	for _, cid := range []string{"x", "y", "z"} {
		out, err := allocPools(t, s, cid, pools)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out[0].Addr.String())
	}
	if want := []string{"10.1.0.10/24", "10.1.0.20/24", "10.2.0.30/24"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	_, err = allocPools(t, s, "w", pools)
	checkErr(t, err, cniplug.CodePoolExhausted, "all 3 addresses of NIC a in 10.1.0.0/24 and NIC b in 10.2.0.0/24 are in use")

	// Requested and sticky work as for ranges.
	s.IPAM("net", func(tx *store.IPAMTx) error { _, err := Release(tx, "y", "eth0"); return err })
	if out, err := allocPools(t, s, "r", pools, withIPs("10.1.0.20")); err != nil || out[0].Addr.String() != "10.1.0.20/24" {
		t.Errorf("requested: %v, %v", out, err)
	}
	_, err = allocPools(t, s, "q", pools, withIPs("10.1.0.99"))
	checkErr(t, err, 7, "10.1.0.99", "outside every range")

	// An empty pool is reported as such.
	_, err = allocPools(t, s, "e", []Pool{{Subnet: prefix("10.9.0.0/24"), Owner: "NIC e", What: "secondary IPs"}})
	checkErr(t, err, cniplug.CodePoolExhausted, "no secondary IPs of NIC e in 10.9.0.0/24")
}

func TestAllocatePoolsDualStack(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pools := []Pool{
		{Subnet: prefix("fd00::/64"), Addrs: []netip.Addr{addr("fd00::5")}, Owner: "NIC 6"},
		{Subnet: prefix("10.1.0.0/24"), Addrs: []netip.Addr{addr("10.1.0.5"), addr("10.1.0.6")}, Owner: "NIC 4"},
	}
	out, err := allocPools(t, s, "a", pools)
	if err != nil || len(out) != 2 || out[0].Addr.String() != "10.1.0.5/24" || out[1].Addr.String() != "fd00::5/64" {
		t.Fatalf("got %+v, %v", out, err)
	}
	// The IPv6 pool is full: the error names it, and the IPv4 address is not kept.
	_, err = allocPools(t, s, "b", pools)
	checkErr(t, err, cniplug.CodePoolExhausted, "all 1 addresses of NIC 6 in fd00::/64")
	s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		if rs := tx.ByOwner("b", "eth0"); len(rs) != 0 {
			t.Errorf("failed ADD kept %v", rs)
		}
		return nil
	})
}
