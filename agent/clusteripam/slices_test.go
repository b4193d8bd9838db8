package clusteripam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// The agents' default slice size (--cluster-ipam-node-slice-size) slices
// the networks that name no node_slice_size, in whereabouts' layout: the
// NodeSlicePool named after the network, a pool per node named
// <node>-<slice>. Networks it cannot serve keep their plain pool; a
// network's explicit node_slice_size wins; an existing NodeSlicePool keeps
// its size; addresses the plain pool held before the default are not
// handed out again, and their pods keep and release them there.
func TestDefaultNodeSlices(t *testing.T) {
	b := etcdBackend(t)
	ctx := ctxT(t)
	def := SliceDefault{V4: 26, V6: 120}
	a1 := &Allocator{B: b, Node: "n1", DefaultSlice: def}
	a2 := &Allocator{B: b, Node: "n2", DefaultSlice: def}
	mk := func(network, cid string, ranges ...string) *agentapi.IPAMRequest {
		r := req(cid, "ns/"+cid, ranges...)
		r.Network = network
		return r
	}
	add := func(t *testing.T, al *Allocator, r *agentapi.IPAMRequest, want ...string) {
		t.Helper()
		ips, err := al.Add(ctx, r)
		if err != nil {
			t.Fatalf("%s: ADD %s: %v", al.Node, r.ContainerID, err)
		}
		if strings.Join(ips, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: ADD %s got %v, want %v", al.Node, r.ContainerID, ips, want)
		}
	}
	slicePool := func(t *testing.T, name, rng, size string, nodes ...string) {
		t.Helper()
		sp, err := b.GetSlicePool(ctx, name)
		if err != nil {
			t.Fatalf("NodeSlicePool %s: %v", name, err)
		}
		if sp.Range != rng || sp.SliceSize != size || len(sp.Slices) < len(nodes) {
			t.Fatalf("NodeSlicePool %s: %+v, want range %s by %s", name, sp, rng, size)
		}
		for i, s := range sp.Slices {
			want := ""
			if i < len(nodes) {
				want = nodes[i]
			}
			if s.Node != want {
				t.Errorf("NodeSlicePool %s: slice %d (%s) leased to %q, want %q", name, i, s.Range, s.Node, want)
			}
		}
	}
	noSlicePool := func(t *testing.T, name string) {
		t.Helper()
		if sp, err := b.GetSlicePool(ctx, name); !errors.Is(err, ErrNotFound) {
			t.Errorf("NodeSlicePool %s: %+v, %v; want none", name, sp, err)
		}
	}

	t.Run("sliced", func(t *testing.T) {
		add(t, a1, mk("green", "g1", "10.50.0.0/24"), "10.50.0.1/24")
		add(t, a2, mk("green", "g2", "10.50.0.0/24"), "10.50.0.65/24")
		add(t, a1, mk("green", "g3", "10.50.0.0/24"), "10.50.0.2/24")
		slicePool(t, "green", "10.50.0.0/24", "/26", "n1", "n2")
		got1 := waitPool(t, b, wbpool.PoolName("10.50.0.0/26", "", "n1"), 2)
		got2 := waitPool(t, b, wbpool.PoolName("10.50.0.64/26", "", "n2"), 1)
		if len(got1) != 2 || len(got2) != 1 {
			t.Errorf("node pools: n1 %v, n2 %v", got1, got2)
		}
		if p, err := b.GetPool(ctx, "10.50.0.0-24", true); !errors.Is(err, ErrNotFound) {
			t.Errorf("the sliced range has a plain pool: %+v, %v", p, err)
		}
		if ips, err := a1.Check(ctx, mk("green", "g3", "10.50.0.0/24")); err != nil || ips[0] != "10.50.0.2/24" {
			t.Errorf("CHECK g3: %v, %v", ips, err)
		}
		for _, r := range []struct {
			al  *Allocator
			cid string
		}{{a1, "g1"}, {a2, "g2"}, {a1, "g3"}} {
			for k := 0; k < 2; k++ {
				if err := r.al.Del(ctx, mk("green", r.cid, "10.50.0.0/24")); err != nil {
					t.Fatalf("DEL %s: %v", r.cid, err)
				}
			}
		}
		waitPool(t, b, wbpool.PoolName("10.50.0.0/26", "", "n1"), 0)
		waitPool(t, b, wbpool.PoolName("10.50.0.64/26", "", "n2"), 0)
	})

	t.Run("IPv6", func(t *testing.T) {
		add(t, a1, mk("green6", "h1", "fd00:50::/112"), "fd00:50::1/112")
		add(t, a2, mk("green6", "h2", "fd00:50::/112"), "fd00:50::101/112")
		slicePool(t, "green6", "fd00:50::/112", "/120", "n1", "n2")
		// An agent with an IPv4 size only leaves IPv6 networks plain.
		a4 := &Allocator{B: b, Node: "n1", DefaultSlice: SliceDefault{V4: 26}}
		add(t, a4, mk("plain6", "h3", "fd00:51::/112"), "fd00:51::1/112")
		noSlicePool(t, "plain6")
	})

	// Networks the default does not apply to keep their plain pool: no
	// NodeSlicePool, the address in the range's IPPool.
	for _, tc := range []struct {
		name string
		r    *agentapi.IPAMRequest
		want []string
		pool string
	}{
		{"range-as-large-as-a-slice", mk("small", "s1", "10.51.0.0/26"), []string{"10.51.0.1/26"}, "10.51.0.0-26"},
		{"range-smaller-than-a-slice", mk("smaller", "s2", "10.51.1.0/28"), []string{"10.51.1.1/28"}, "10.51.1.0-28"},
		{"range_start", func() *agentapi.IPAMRequest {
			r := mk("started", "s3", "10.51.2.0/24")
			r.Ranges[0].Start = "10.51.2.100"
			return r
		}(), []string{"10.51.2.100/24"}, "10.51.2.0-24"},
		{"two-ranges", mk("dual", "s4", "10.51.3.0/24", "fd00:53::/112"), []string{"10.51.3.1/24", "fd00:53::1/112"}, "10.51.3.0-24"},
		{"exclude-of-a-whole-slice", func() *agentapi.IPAMRequest {
			r := mk("excluded", "s5", "10.51.4.0/24")
			r.Ranges[0].Exclude = []string{"10.51.4.0/25"}
			return r
		}(), []string{"10.51.4.128/24"}, "10.51.4.0-24"},
		{"more-than-65536-slices", mk("wide", "s6", "10.128.0.0/9"), []string{"10.128.0.1/9"}, "10.128.0.0-9"},
	} {
		t.Run("plain/"+tc.name, func(t *testing.T) {
			add(t, a1, tc.r, tc.want...)
			noSlicePool(t, tc.r.Network)
			if got := allocations(t, b, tc.pool); len(got) != 1 {
				t.Errorf("IPPool %s holds %v, want the address", tc.pool, got)
			}
		})
	}

	t.Run("explicit-node_slice_size-wins", func(t *testing.T) {
		r := mk("blue-net", "e1", "10.52.0.0/24")
		r.NetworkName, r.NodeSliceSize = "blue", "/28"
		add(t, a2, r, "10.52.0.1/24")
		slicePool(t, "blue", "10.52.0.0/24", "/28", "n2")
		waitPool(t, b, wbpool.PoolName("10.52.0.0/28", "blue", "n2"), 1)
	})

	t.Run("existing-NodeSlicePool-keeps-its-size", func(t *testing.T) {
		before := &Allocator{B: b, Node: "n1", DefaultSlice: SliceDefault{V4: 27}}
		add(t, before, mk("red", "r1", "10.53.0.0/24"), "10.53.0.1/24")
		add(t, a2, mk("red", "r2", "10.53.0.0/24"), "10.53.0.33/24")
		slicePool(t, "red", "10.53.0.0/24", "/27", "n1", "n2")
	})

	t.Run("NodeSlicePool-of-another-range", func(t *testing.T) {
		add(t, a1, mk("teal", "t1", "10.54.0.0/24"), "10.54.0.1/24")
		// Another network of the same name: its own range stays plain.
		add(t, a2, mk("teal", "t2", "10.55.0.0/24"), "10.55.0.1/24")
		slicePool(t, "teal", "10.54.0.0/24", "/26", "n1")
		if got := allocations(t, b, "10.55.0.0-24"); len(got) != 1 {
			t.Errorf("plain IPPool 10.55.0.0-24 holds %v", got)
		}
	})

	t.Run("plain-pool-of-before-the-default", func(t *testing.T) {
		const rng = "10.56.0.0/24"
		before := &Allocator{B: b, Node: "n1"}
		for i, cid := range []string{"p1", "p2", "p3"} {
			add(t, before, mk("old", cid, rng), fmt.Sprintf("10.56.0.%d/24", i+1))
		}
		// A new pod gets none of the plain pool's addresses.
		add(t, a1, mk("old", "new1", rng), "10.56.0.4/24")
		// The same attachment again, and its pod with a new container,
		// keep their addresses, in the plain pool.
		add(t, a1, mk("old", "p1", rng), "10.56.0.1/24")
		again := mk("old", "p2-again", rng)
		again.PodRef = "ns/p2"
		add(t, a1, again, "10.56.0.2/24")
		if p, err := b.GetPool(ctx, "10.56.0.0-24", true); err != nil || p.Allocations["2"].ContainerID != "p2-again" {
			t.Errorf("plain pool after p2's new container: %+v, %v", p, err)
		}
		if ips, err := a1.Check(ctx, mk("old", "p3", rng)); err != nil || ips[0] != "10.56.0.3/24" {
			t.Errorf("CHECK p3: %v, %v", ips, err)
		}
		// DEL frees p3's address in the plain pool: the next pod gets it.
		for k := 0; k < 2; k++ {
			if err := a1.Del(ctx, mk("old", "p3", rng)); err != nil {
				t.Fatal(err)
			}
		}
		if got := allocations(t, b, "10.56.0.0-24"); len(got) != 2 {
			t.Errorf("plain pool after DEL p3: %v, want p1 and p2", got)
		}
		add(t, a1, mk("old", "new2", rng), "10.56.0.3/24")
		if got := waitPool(t, b, wbpool.PoolName("10.56.0.0/26", "", "n1"), 2); got[netip.MustParseAddr("10.56.0.3")] != "ns/new2" {
			t.Errorf("n1's slice pool: %v", got)
		}
	})

	// A node left without a slice: ADD is error Exhausted naming the flag;
	// DEL and CHECK of its pods of before the default find them in the
	// plain pool; DEL with the network's own node_slice_size succeeds.
	t.Run("slices-exhausted", func(t *testing.T) {
		a3 := &Allocator{B: b, Node: "n3", DefaultSlice: def}
		add(t, &Allocator{B: b, Node: "n3"}, mk("tiny", "x0", "10.57.0.0/25"), "10.57.0.1/25")
		add(t, a1, mk("tiny", "x1", "10.57.0.0/25"), "10.57.0.2/25")
		add(t, a2, mk("tiny", "x2", "10.57.0.0/25"), "10.57.0.65/25")
		_, err := a3.Add(ctx, mk("tiny", "x3", "10.57.0.0/25"))
		var ae *agentapi.Error
		if !errors.As(err, &ae) || ae.Reason != agentapi.ReasonExhausted || !strings.Contains(err.Error(), DefaultSliceFlag) {
			t.Errorf("a third node on two slices: %v; want Exhausted naming %s", err, DefaultSliceFlag)
		}
		if ips, err := a3.Check(ctx, mk("tiny", "x0", "10.57.0.0/25")); err != nil || len(ips) != 1 || ips[0] != "10.57.0.1/25" {
			t.Errorf("CHECK x0 on the node without a slice: %v, %v", ips, err)
		}
		for k := 0; k < 2; k++ {
			if err := a3.Del(ctx, mk("tiny", "x0", "10.57.0.0/25")); err != nil {
				t.Fatalf("DEL x0 on the node without a slice: %v", err)
			}
		}
		if got := allocations(t, b, "10.57.0.0-25"); len(got) != 0 {
			t.Errorf("plain pool after DEL x0: %v", got)
		}
		explicit := func(cid string) *agentapi.IPAMRequest {
			r := mk("tinyx", cid, "10.58.0.0/25")
			r.NodeSliceSize = "/26"
			return r
		}
		add(t, a1, explicit("y1"), "10.58.0.1/25")
		add(t, a2, explicit("y2"), "10.58.0.65/25")
		if err := a3.Del(ctx, explicit("y3")); err != nil {
			t.Errorf("DEL on a node without a slice of node_slice_size: %v", err)
		}
	})
}
