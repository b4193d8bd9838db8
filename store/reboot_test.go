package store

import (
	"net/netip"
	"slices"
	"testing"
)

// TestReclaimAfterReboot plays a reboot from boot "A" to boot "B": the first
// call of boot B releases the reservations and endpoint records of boot A
// whose namespace is gone, keeps those whose namespace still exists, those of
// boot B and those a sticky pod's record names; later calls do nothing.
func TestReclaimAfterReboot(t *testing.T) {
	s := openT(t, t.TempDir())
	reserve := func(network, addr, cid, pod, boot string) {
		t.Helper()
		if err := s.IPAM(network, func(tx *IPAMTx) error {
			r := res(addr, cid, "eth0")
			r.Pod, r.BootID = pod, boot
			return tx.Reserve(r)
		}); err != nil {
			t.Fatal(err)
		}
	}
	endpoint := func(network, cid, netns, boot string) {
		t.Helper()
		if err := s.PutEndpoint(Endpoint{Network: network, ContainerID: cid, IfName: "eth0", Netns: netns, BootID: boot}); err != nil {
			t.Fatal(err)
		}
	}
	reserve("n1", "10.1.0.1", "alive", "", "A")
	endpoint("n1", "alive", "/run/netns/alive", "A")
	reserve("n1", "10.1.0.2", "gone", "", "A")
	endpoint("n1", "gone", "/run/netns/gone", "A")
	reserve("n1", "10.1.0.3", "norecord", "", "A")
	reserve("n1", "10.1.0.4", "current", "", "B")
	endpoint("n1", "current", "/run/netns/gone-too", "B")
	reserve("n1", "10.1.0.5", "sticky", "ns/web-0", "A")
	reserve("n2", "10.2.0.1", "other", "", "A")
	endpoint("n2", "recordonly", "/run/netns/gone", "A")
	if err := s.IPAM("n1", func(tx *IPAMTx) error { return tx.SetSticky("ns/web-0", []netip.Addr{a("10.1.0.5")}) }); err != nil {
		t.Fatal(err)
	}

	o := ReclaimOptions{BootID: "B", Alive: func(p string) bool { return p == "/run/netns/alive" }}
	var got Reclaimed
	if err := s.IPAM("n1", func(tx *IPAMTx) (err error) {
		got, err = tx.ReclaimAfterReboot(o)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !got.Ran {
		t.Fatal("first call of boot B did not reclaim")
	}
	addrs := func(rs []Reservation) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Network+" "+r.Addr.String())
		}
		slices.Sort(out)
		return out
	}
	if want := []string{"n1 10.1.0.2", "n1 10.1.0.3", "n2 10.2.0.1"}; !slices.Equal(addrs(got.Released), want) {
		t.Errorf("released %v, want %v", addrs(got.Released), want)
	}
	if want := []string{"n1 10.1.0.5"}; !slices.Equal(addrs(got.KeptSticky), want) {
		t.Errorf("kept for sticky pods %v, want %v", addrs(got.KeptSticky), want)
	}
	var deleted []string
	for _, e := range got.Deleted {
		deleted = append(deleted, e.Network+" "+e.ContainerID)
	}
	slices.Sort(deleted)
	if want := []string{"n1 gone", "n2 recordonly"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted records %v, want %v", deleted, want)
	}
	left := func(network string) []string {
		var out []Reservation
		if err := s.ViewIPAM(network, func(tx *IPAMTx) error { out = tx.All(); return nil }); err != nil {
			t.Fatal(err)
		}
		return addrs(out)
	}
	if want := []string{"n1 10.1.0.1", "n1 10.1.0.4", "n1 10.1.0.5"}; !slices.Equal(left("n1"), want) {
		t.Errorf("n1 keeps %v, want %v", left("n1"), want)
	}
	if l := left("n2"); len(l) != 0 {
		t.Errorf("n2 keeps %v, want nothing", l)
	}
	eps, err := s.Endpoints("")
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 {
		t.Errorf("%d endpoint records left, want 2 (alive, current): %+v", len(eps), eps)
	}

	// The second call of the boot does nothing, even with new ghosts.
	reserve("n1", "10.1.0.9", "late", "", "A")
	if err := s.IPAM("n1", func(tx *IPAMTx) (err error) {
		got, err = tx.ReclaimAfterReboot(o)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got.Ran || len(got.Released) != 0 {
		t.Errorf("second call of the boot: %+v", got)
	}

	// The sticky pod comes back under a new container ID: its address is
	// handed over.
	if err := s.IPAM("n1", func(tx *IPAMTx) error {
		rel, err := tx.ReleaseStaleSticky("ns/web-0", o)
		if err != nil {
			return err
		}
		if len(rel) != 1 || rel[0].Addr != a("10.1.0.5") {
			t.Errorf("ReleaseStaleSticky released %v", rel)
		}
		r := res("10.1.0.5", "web-0-new", "eth0")
		r.Pod, r.BootID = "ns/web-0", "B"
		return tx.Reserve(r)
	}); err != nil {
		t.Fatal(err)
	}
	// Another pod's stale-sticky call releases nothing of it, nor does the
	// same boot.
	if err := s.IPAM("n1", func(tx *IPAMTx) error {
		rel, err := tx.ReleaseStaleSticky("ns/web-0", o)
		if len(rel) != 0 {
			t.Errorf("released the new attachment's address: %v", rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReclaimNoBoot: without a boot ID nothing is reclaimed.
func TestReclaimNoBoot(t *testing.T) {
	s := openT(t, t.TempDir())
	update(t, s, func(tx *IPAMTx) error {
		r := res("10.1.0.1", "c", "eth0")
		r.BootID = "A"
		return tx.Reserve(r)
	})
	t.Setenv(EnvBootID, "")
	update(t, s, func(tx *IPAMTx) error {
		got, err := tx.ReclaimAfterReboot(ReclaimOptions{BootID: "", Alive: func(string) bool { return false }})
		if BootID() == "" && got.Ran {
			t.Error("reclaimed without a boot ID")
		}
		return err
	})
}

func TestIsNetns(t *testing.T) {
	if !IsNetns("/proc/self/ns/net") {
		t.Error("/proc/self/ns/net is not a namespace")
	}
	for _, p := range []string{t.TempDir(), "/proc/self/status", "/nonexistent", ""} {
		if IsNetns(p) {
			t.Errorf("IsNetns(%q) = true", p)
		}
	}
}
