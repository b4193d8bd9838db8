package lbipam

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Block is a range of addresses of one family, First <= Last.
type Block struct{ First, Last netip.Addr }

// Contains reports whether a lies in b.
func (b Block) Contains(a netip.Addr) bool {
	return a.BitLen() == b.First.BitLen() && a.Compare(b.First) >= 0 && a.Compare(b.Last) <= 0
}

// overlaps reports whether b and c share an address.
func (b Block) overlaps(c Block) bool {
	return b.First.BitLen() == c.First.BitLen() && b.First.Compare(c.Last) <= 0 && c.First.Compare(b.Last) <= 0
}

// size is the number of addresses of b (a float: an IPv6 block may hold
// more than 2^64).
func (b Block) size() float64 {
	f, l := b.First.As16(), b.Last.As16()
	var d float64
	for i := range 16 {
		d = d*256 + float64(int(l[i])-int(f[i]))
	}
	return d + 1
}

func (b Block) String() string {
	if b.First == b.Last {
		return b.First.String()
	}
	return b.First.String() + "-" + b.Last.String()
}

// Pool is a LoadBalancerIPPool as the allocator reads it.
type Pool struct {
	Name    string
	Created time.Time
	Blocks  []Block
	// Selector selects the Services that may take its addresses (nil:
	// every Service); it matches a Service's labels and the two the
	// controller adds (NamespaceLabel, NameLabel).
	Selector labels.Selector
	Disabled bool
	// Manual: spec.autoAssign false: the pool gives addresses only to
	// the Services that ask for one of them or name the pool
	// (AnnotationPool), as MetalLB's IPAddressPool autoAssign.
	Manual bool
	// Conflict says why the pool is not allocated from: one of its blocks
	// overlaps an earlier pool's, the cluster's networks or a node's
	// address (Refuse); "" none.
	Conflict string
}

// Labels the controller adds to a Service's own when a pool's
// serviceSelector matches it, as Cilium's LB-IPAM does: a pool can select
// Services by namespace or name.
const (
	NamespaceLabel = "io.kubernetes.service.namespace"
	NameLabel      = "io.kubernetes.service.name"
)

// BlockSpec is one entry of spec.blocks: a cidr, or a start and a stop.
type BlockSpec struct {
	CIDR  string `json:"cidr,omitempty"`
	Start string `json:"start,omitempty"`
	Stop  string `json:"stop,omitempty"`
}

// ParseBlock reads s; allowFirstLast keeps the first and last address of
// a CIDR (its network and broadcast addresses in IPv4), which are left out
// otherwise unless the CIDR has at most two addresses. The schema refuses
// what does not parse; the error names the field for an object the API
// kept from before.
func ParseBlock(s BlockSpec, allowFirstLast bool) (Block, error) {
	if s.CIDR != "" {
		p, err := netip.ParsePrefix(strings.TrimSpace(s.CIDR))
		if err != nil {
			return Block{}, fmt.Errorf("cidr %q: %w", s.CIDR, err)
		}
		p = p.Masked()
		b := Block{First: p.Addr(), Last: lastOf(p)}
		if !allowFirstLast && p.Addr().BitLen()-p.Bits() > 1 {
			b.First, b.Last = b.First.Next(), b.Last.Prev()
		}
		return b, nil
	}
	first, err1 := netip.ParseAddr(strings.TrimSpace(s.Start))
	last, err2 := netip.ParseAddr(strings.TrimSpace(s.Stop))
	switch {
	case err1 != nil:
		return Block{}, fmt.Errorf("start %q: not an address (a block is a cidr, or a start and a stop)", s.Start)
	case err2 != nil:
		return Block{}, fmt.Errorf("stop %q: not an address (a block is a cidr, or a start and a stop)", s.Stop)
	case first.Unmap().BitLen() != last.Unmap().BitLen():
		return Block{}, fmt.Errorf("start %s and stop %s: not of one family", first, last)
	case first.Unmap().Compare(last.Unmap()) > 0:
		return Block{}, fmt.Errorf("start %s is after stop %s", first, last)
	}
	return Block{First: first.Unmap(), Last: last.Unmap()}, nil
}

// lastOf is the last address of p (masked).
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Refuse sets the Conflict of each pool (without one yet) that may not be allocated from:
// one whose block holds an address of reserved (the cluster's and the
// Services' networks, the nodes' addresses: networks named, nodes as /32
// and /128), or overlaps a block of a pool that comes before it (older,
// then by name; a disabled pool still holds its blocks). Pools are sorted
// in that order.
func Refuse(pools []*Pool, reserved map[string][]netip.Prefix) {
	slices.SortFunc(pools, func(a, b *Pool) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name))
	})
	whats := make([]string, 0, len(reserved))
	for w := range reserved {
		whats = append(whats, w)
	}
	slices.Sort(whats)
	for i, p := range pools {
		if p.Conflict != "" {
			continue // (a block that does not parse: the caller's)
		}
	blocks:
		for _, b := range p.Blocks {
			for _, w := range whats {
				for _, r := range reserved[w] {
					if r.Addr().BitLen() != b.First.BitLen() {
						continue
					}
					if rb := (Block{First: r.Masked().Addr(), Last: lastOf(r.Masked())}); rb.overlaps(b) {
						p.Conflict = fmt.Sprintf("block %s overlaps %s %s", b, w, r)
						break blocks
					}
				}
			}
			for _, q := range pools[:i] {
				if q.Conflict != "" {
					continue
				}
				for _, c := range q.Blocks {
					if c.overlaps(b) {
						p.Conflict = fmt.Sprintf("block %s overlaps block %s of pool %s", b, c, q.Name)
						break blocks
					}
				}
			}
		}
	}
}

// Size is the number of addresses of p's blocks.
func (p *Pool) Size() float64 {
	var n float64
	for _, b := range p.Blocks {
		n += b.size()
	}
	return math.Round(n)
}

// usable reports whether p may give an address to a Service of labels ls.
func (p *Pool) usable(ls labels.Labels) bool {
	return !p.Disabled && p.Conflict == "" && (p.Selector == nil || p.Selector.Matches(ls))
}

// assigns reports whether p may give s an address s did not ask for: s
// names p, or names no pool and p assigns automatically.
func (p *Pool) assigns(s *Service) bool {
	if s.Pool != "" {
		return s.Pool == p.Name
	}
	return !p.Manual
}

// block is the block of p that holds a, if any.
func (p *Pool) holds(a netip.Addr) bool {
	return slices.ContainsFunc(p.Blocks, func(b Block) bool { return b.Contains(a) })
}
