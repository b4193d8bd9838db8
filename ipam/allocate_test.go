package ipam

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// pool is a store and range sets to allocate from, for tests.
type pool struct {
	t    *testing.T
	s    *store.Store
	sets []RangeSet
}

func newPool(t *testing.T, sets ...[]RangeConfig) *pool {
	t.Helper()
	parsed, err := ParseSets("ipam.ranges", sets)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &pool{t: t, s: s, sets: parsed}
}

func subnets(cidrs ...string) []RangeConfig {
	var out []RangeConfig
	for _, c := range cidrs {
		out = append(out, RangeConfig{Subnet: c})
	}
	return out
}

// alloc runs Allocate for cid in its own transaction.
func (p *pool) alloc(cid string, mod ...func(*Request)) ([]Allocation, error) {
	req := Request{ContainerID: cid, IfName: "eth0", Sets: p.sets}
	for _, m := range mod {
		m(&req)
	}
	var out []Allocation
	err := p.s.IPAM("net", func(tx *store.IPAMTx) (err error) {
		out, err = Allocate(tx, req)
		return err
	})
	return out, err
}

// must allocates and returns the addresses as strings.
func (p *pool) must(cid string, mod ...func(*Request)) []string {
	p.t.Helper()
	out, err := p.alloc(cid, mod...)
	if err != nil {
		p.t.Fatalf("allocate %s: %v", cid, err)
	}
	var s []string
	for _, a := range out {
		s = append(s, a.Addr.String())
	}
	return s
}

func (p *pool) release(cid string) {
	p.t.Helper()
	if err := p.s.IPAM("net", func(tx *store.IPAMTx) error { _, err := Release(tx, cid, "eth0"); return err }); err != nil {
		p.t.Fatal(err)
	}
}

func withPod(pod string, sticky bool) func(*Request) {
	return func(r *Request) { r.Pod, r.Sticky = pod, sticky }
}

func withIPs(ips ...string) func(*Request) {
	return func(r *Request) {
		for _, s := range ips {
			r.Requested = append(r.Requested, addr(s))
		}
	}
}

func TestRoundRobinAndExhaustion(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/29")) // .1-.6, gateway .1
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, p.must(fmt.Sprint("c", i))...)
	}
	want := []string{"10.0.0.2/29", "10.0.0.3/29", "10.0.0.4/29", "10.0.0.5/29", "10.0.0.6/29"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	_, err := p.alloc("c5")
	checkErr(t, err, cniplug.CodePoolExhausted, `network "net"`, "range 10.0.0.1-10.0.0.6", "(5 of 5 in use)", "cnibox gc")

	// Wrap: the freed address is found again after the cursor wraps,
	// skipping the gateway.
	p.release("c1")
	if got := p.must("c6"); got[0] != "10.0.0.3/29" {
		t.Errorf("after wrap got %v, want 10.0.0.3/29", got)
	}
}

func TestRoundRobinDoesNotReuseAtOnce(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"))
	p.must("c1") // .2
	p.must("c2") // .3
	p.release("c1")
	if got := p.must("c3"); got[0] != "10.0.0.4/24" {
		t.Errorf("got %v, want 10.0.0.4/24 (not the just released .2)", got)
	}
}

func TestGatewayInTheMiddle(t *testing.T) {
	p := newPool(t, []RangeConfig{{Subnet: "10.0.0.0/29", Gateway: "10.0.0.3"}})
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, p.must(fmt.Sprint("c", i))...)
	}
	want := []string{"10.0.0.1/29", "10.0.0.2/29", "10.0.0.4/29", "10.0.0.5/29", "10.0.0.6/29"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	out, _ := p.alloc("c0")
	if out[0].Gateway != addr("10.0.0.3") {
		t.Errorf("gateway %v", out[0].Gateway)
	}
}

func TestNeverNetworkOrBroadcast(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/30")) // only .2 is usable
	if got := p.must("c0"); got[0] != "10.0.0.2/30" {
		t.Fatalf("got %v", got)
	}
	_, err := p.alloc("c1")
	checkErr(t, err, cniplug.CodePoolExhausted, "(1 of 1 in use)")
}

func TestMultiSubnetSet(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/30", "10.0.1.0/30"))
	got := append(p.must("a"), p.must("b")...)
	if want := []string{"10.0.0.2/30", "10.0.1.2/30"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	_, err := p.alloc("c")
	checkErr(t, err, cniplug.CodePoolExhausted, "ranges 10.0.0.1-10.0.0.2, 10.0.1.1-10.0.1.2", "(2 of 2 in use)", "widen the ranges")
	// Wrap from the second range back to the first.
	p.release("a")
	if got := p.must("d"); got[0] != "10.0.0.2/30" {
		t.Errorf("got %v after wrap", got)
	}
}

func TestDualStack(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"), subnets("fd00::/64"))
	out, err := p.alloc("c1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Allocation{
		{Addr: prefix("10.0.0.2/24"), Gateway: addr("10.0.0.1"), Set: 0},
		{Addr: prefix("fd00::2/64"), Gateway: addr("fd00::1"), Set: 1},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("got %+v, want %+v", out, want)
	}
}

func TestDualStackAllOrNothing(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"), []RangeConfig{{Subnet: "fd00::/126", RangeEnd: "fd00::2"}}) // one IPv6 address: ::2
	p.must("c1")
	if _, err := p.alloc("c2"); cniplug.CodeOf(err) != cniplug.CodePoolExhausted {
		t.Fatalf("err = %v, want exhaustion", err)
	}
	p.s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		if rs := tx.ByOwner("c2", "eth0"); len(rs) != 0 {
			t.Errorf("the IPv4 address of a failed dual-stack ADD was kept: %+v", rs)
		}
		return nil
	})
}

func TestSameOwnerAgain(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"), subnets("fd00::/64"))
	first := p.must("c1")
	again := p.must("c1")
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("retry got %v, first %v", again, first)
	}
	// The cursor did not move: the next container gets the next address.
	if got := p.must("c2"); got[0] != "10.0.0.3/24" || got[1] != "fd00::3/64" {
		t.Errorf("next container got %v", got)
	}
	// Another interface of the same container is another attachment.
	out, _ := p.alloc("c1", func(r *Request) { r.IfName = "net1" })
	if out[0].Addr.String() != "10.0.0.4/24" {
		t.Errorf("c1/net1 got %v", out[0].Addr)
	}
	// A partial holding (a set added to the config later) is completed.
	p2 := newPool(t, subnets("10.0.0.0/24"))
	p2.must("c1")
	p2.sets = append(p2.sets, p.sets[1])
	if got := p2.must("c1"); !reflect.DeepEqual(got, []string{"10.0.0.2/24", "fd00::2/64"}) {
		t.Errorf("completed holding %v", got)
	}
}

func TestRequested(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"), subnets("fd00::/64"))
	if got := p.must("c1", withIPs("10.0.0.50")); got[0] != "10.0.0.50/24" || got[1] != "fd00::2/64" {
		t.Fatalf("got %v", got)
	}
	if got := p.must("c2", withIPs("fd00::50", "10.0.0.51")); got[0] != "10.0.0.51/24" || got[1] != "fd00::50/64" {
		t.Fatalf("got %v", got)
	}
	// Requested addresses do not move the cursor.
	if got := p.must("c3"); got[0] != "10.0.0.2/24" {
		t.Errorf("round robin after requests got %v", got)
	}
	// Retry with the same request is fine.
	if got := p.must("c1", withIPs("10.0.0.50")); got[0] != "10.0.0.50/24" {
		t.Errorf("retry got %v", got)
	}

	tests := []struct {
		name  string
		cid   string
		ips   []string
		words []string
	}{
		{"taken", "c9", []string{"10.0.0.50"}, []string{"10.0.0.50", "held by container c1 interface eth0", "request another"}},
		{"outside every range", "c9", []string{"10.9.0.1"}, []string{"10.9.0.1", "outside every range", "10.0.0.1-10.0.0.254", "fd00::1-fd00::ffff:ffff:ffff:ffff"}},
		{"broadcast", "c9", []string{"10.0.0.255"}, []string{"outside every range"}},
		{"gateway", "c9", []string{"10.0.0.1"}, []string{"10.0.0.1", "gateway"}},
		{"two in one set", "c9", []string{"10.0.0.60", "10.0.0.61"}, []string{"10.0.0.60", "10.0.0.61", "one address"}},
		{"differs from held", "c1", []string{"10.0.0.70"}, []string{"already holds 10.0.0.50", "10.0.0.70", "DEL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.alloc(tt.cid, withIPs(tt.ips...))
			checkErr(t, err, 7, append([]string{`network "net"`}, tt.words...)...)
		})
	}
	t.Run("holder pod named", func(t *testing.T) {
		p.must("c4", withIPs("10.0.0.80"), withPod("ns/web", false))
		_, err := p.alloc("c9", withIPs("10.0.0.80"))
		checkErr(t, err, 7, "pod ns/web")
	})
}

func TestSticky(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"), subnets("fd00::/64"))
	first := p.must("c1", withPod("ns/db", true)) // .2, ::2
	p.release("c1")
	p.must("c2") // .3
	// The pod comes back under a new container ID: same addresses.
	if got := p.must("c3", withPod("ns/db", true)); !reflect.DeepEqual(got, first) {
		t.Fatalf("sticky got %v, want %v", got, first)
	}
	p.release("c3")
	// Without sticky in the request the previous address is not used.
	if got := p.must("c4", withPod("ns/db", false)); got[0] != "10.0.0.4/24" {
		t.Errorf("non-sticky got %v", got)
	}
	// While someone else holds it, the pod gets a fresh address, and the
	// record follows the pod's new address.
	p.must("c5", withIPs("10.0.0.2"))
	got := p.must("c6", withPod("ns/db", true))
	if got[0] != "10.0.0.5/24" || got[1] != "fd00::2/64" {
		t.Errorf("sticky while taken got %v", got)
	}
	p.release("c6")
	if got := p.must("c7", withPod("ns/db", true)); got[0] != "10.0.0.5/24" {
		t.Errorf("sticky after moving got %v", got)
	}
}

func TestCursorOutsideRanges(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/24"))
	p.s.IPAM("net", func(tx *store.IPAMTx) error { return tx.SetCursor(p.sets[0].ID(), addr("10.9.9.9")) })
	if got := p.must("c1"); got[0] != "10.0.0.2/24" {
		t.Errorf("got %v", got)
	}
}

func TestGCAndHeldAndUsage(t *testing.T) {
	p := newPool(t, subnets("10.0.0.0/29"), subnets("fd00::/126"))
	p.must("keep")
	p.sets = p.sets[:1]
	for _, c := range []string{"drop1", "drop2"} {
		p.must(c)
	}
	var freed []store.Reservation
	err := p.s.IPAM("net", func(tx *store.IPAMTx) (err error) {
		freed, err = GC(tx, func(cid, ifname string) bool { return cid == "keep" && ifname == "eth0" })
		return err
	})
	if err != nil || len(freed) != 2 {
		t.Fatalf("GC freed %d, %v", len(freed), err)
	}
	p.s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		all := tx.All()
		if len(all) != 2 || all[0].ContainerID != "keep" || all[1].ContainerID != "keep" {
			t.Errorf("after GC: %+v", all)
		}
		full := append(p.sets, RangeSet{{Subnet: prefix("fd00::/126"), Start: addr("fd00::1"), End: addr("fd00::3"), Gateway: addr("fd00::1")}})
		held, missing := Held(tx, "keep", "eth0", full)
		if len(held) != 2 || len(missing) != 0 {
			t.Errorf("Held(keep) = %v, missing %v", held, missing)
		}
		if _, missing := Held(tx, "drop1", "eth0", full); !reflect.DeepEqual(missing, []int{0, 1}) {
			t.Errorf("Held(drop1) missing %v", missing)
		}
		u := Usage(tx, full)
		if u[0].Used != 1 || u[0].Capacity != 5 || u[0].Full {
			t.Errorf("usage v4 %+v", u[0])
		}
		if u[1].Used != 1 || u[1].Capacity != 2 || u[1].Full {
			t.Errorf("usage v6 %+v", u[1])
		}
		if err := Ready(tx, "net", full); err != nil {
			t.Errorf("Ready: %v", err)
		}
		return nil
	})
	p.sets = append(p.sets, RangeSet{{Subnet: prefix("fd00::/126"), Start: addr("fd00::1"), End: addr("fd00::3"), Gateway: addr("fd00::1")}})
	p.must("x") // takes the last IPv6 address
	p.s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		err := Ready(tx, "net", p.sets)
		checkErr(t, err, cniplug.CodeNotReady, `network "net"`, "fd00::1-fd00::3")
		return nil
	})
	// GC with nothing to keep releases all.
	p.s.IPAM("net", func(tx *store.IPAMTx) error { _, err := GC(tx, nil); return err })
	p.s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		if n := len(tx.All()); n != 0 {
			t.Errorf("%d left after GC(nil)", n)
		}
		return nil
	})
}

func TestNoSets(t *testing.T) {
	p := newPool(t)
	_, err := p.alloc("c1")
	checkErr(t, err, 7, "no range sets")
}

func TestHugeIPv6Usage(t *testing.T) {
	p := newPool(t, subnets("fd00::/8"))
	p.must("c1")
	p.s.ViewIPAM("net", func(tx *store.IPAMTx) error {
		u := Usage(tx, p.sets)[0]
		if u.Used != 1 || u.Capacity != ^uint64(0) || u.Full {
			t.Errorf("usage %+v", u)
		}
		return nil
	})
	_ = netip.Addr{}
}
