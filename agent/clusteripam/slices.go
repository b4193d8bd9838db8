package clusteripam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// DefaultSliceFlag is the agent's flag that sets SliceDefault (named in
// errors and logs).
const DefaultSliceFlag = "--cluster-ipam-node-slice-size"

// SliceDefault is the node slice size of the networks that name no
// node_slice_size (cnibox-agent --cluster-ipam-node-slice-size): a prefix
// length per family, 0 for none. The zero value is off. It is a
// flag.Value.
type SliceDefault struct{ V4, V6 int }

// ParseSliceDefault reads "" (off), "/26", "/120" or "/26,/120" (the
// slash is optional): a length of at most 32 is IPv4's, a longer one
// IPv6's (an IPv6 slice of /32 or shorter would hold more addresses than a
// node ever hands out). A slice must have a usable address: at most /30
// (IPv4), /126 (IPv6).
func ParseSliceDefault(s string) (SliceDefault, error) {
	var d SliceDefault
	s = strings.TrimSpace(s)
	if s == "" {
		return d, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(strings.TrimPrefix(f, "/"))
		switch {
		case err != nil || n < 1 || n > 128:
			return SliceDefault{}, fmt.Errorf("%q is not a prefix length: want e.g. /26 (IPv4), /120 (IPv6) or /26,/120", f)
		case n <= 32 && n > 30:
			return SliceDefault{}, fmt.Errorf("an IPv4 slice of /%d has no usable address: use /30 or shorter (e.g. /26, 62 addresses a node)", n)
		case n > 126:
			return SliceDefault{}, fmt.Errorf("an IPv6 slice of /%d has no usable address: use /126 or shorter (e.g. /120)", n)
		case n <= 32 && d.V4 != 0, n > 32 && d.V6 != 0:
			return SliceDefault{}, fmt.Errorf("%q gives two sizes of one family: give at most one IPv4 size (up to /30) and one IPv6 size (/33 to /126)", s)
		case n <= 32:
			d.V4 = n
		default:
			d.V6 = n
		}
	}
	return d, nil
}

// String is the value as ParseSliceDefault reads it ("" when off).
func (d SliceDefault) String() string {
	var out []string
	for _, n := range []int{d.V4, d.V6} {
		if n != 0 {
			out = append(out, "/"+strconv.Itoa(n))
		}
	}
	return strings.Join(out, ",")
}

// Set parses s into d (flag.Value).
func (d *SliceDefault) Set(s string) error {
	v, err := ParseSliceDefault(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// defaultSlice returns the node slice size that DefaultSlice gives r, a
// range of a network that names no node_slice_size, or "" where it does
// not apply and the range keeps its plain pool: a network of more than one
// range (a NodeSlicePool holds one), a range_start or range_end (slices
// would hand out addresses outside them), a range not larger than a slice
// (one slice would serve one node), more than 65536 slices, an exclude
// entry as large as a slice (a node could lease a slice without a usable
// address).
func (al *Allocator) defaultSlice(req *agentapi.IPAMRequest, r wbpool.Range) string {
	n := al.DefaultSlice.V4
	if r.Prefix.Addr().Is6() {
		n = al.DefaultSlice.V6
	}
	if n == 0 {
		return ""
	}
	var why string
	switch {
	case len(req.Ranges) != 1:
		why = fmt.Sprintf("it has %d ranges and a NodeSlicePool holds one", len(req.Ranges))
	case r.Start.IsValid() || r.End.IsValid():
		why = "it has range_start or range_end (or the a-b/nn form), which slices would not keep"
	case r.Prefix.Bits() >= n:
		why = fmt.Sprintf("its range %s is not larger than a /%d slice", r.Prefix, n)
	case n-r.Prefix.Bits() > 16:
		why = fmt.Sprintf("/%d slices would cut its range %s into more than 65536", n, r.Prefix)
	default:
		for _, x := range r.Exclude {
			if x.Bits() <= n && x.Overlaps(r.Prefix) {
				why = fmt.Sprintf("its exclude %s covers a whole /%d slice", x, n)
				break
			}
		}
	}
	if why != "" {
		key := req.Network + "|" + req.NetworkName + "|" + r.Prefix.String()
		if _, seen := al.plainNoted.LoadOrStore(key, true); !seen {
			al.logger().Info("cluster IPAM: the network keeps its plain pool: "+DefaultSliceFlag+" does not apply", "network", req.Network, "network_name", req.NetworkName, "range", r.Prefix, "why", why)
		}
		return ""
	}
	return "/" + strconv.Itoa(n)
}

// sliceCache holds the slices this node leased, by NodeSlicePool name,
// range and size; an invalid prefix is a range the default leaves plain
// (its NodeSlicePool divides another range).
type sliceCache struct {
	mu sync.Mutex
	m  map[string]netip.Prefix
}

// nodeSlice returns this node's slice of rng in the network's
// NodeSlicePool (node_slice_size, or the agent's default when implicit),
// creating the pool and leasing a free slice when needed, as whereabouts'
// node slice controller does for every node (cnibox's agents lease their
// own, so no controller is needed). Under the default, an existing
// NodeSlicePool of the range keeps its own slice size (the flag changed
// since it was made), and one of another range (networks of one name, or
// network_name, with different ranges) leaves the range plain: an invalid
// prefix.
func (al *Allocator) nodeSlice(ctx context.Context, req *agentapi.IPAMRequest, rng netip.Prefix, size string, implicit bool) (netip.Prefix, error) {
	name := wbpool.NodeSlicePoolName(req.NetworkName, req.Network)
	key := name + "|" + rng.String() + "|" + size
	al.slice.mu.Lock()
	defer al.slice.mu.Unlock()
	if p, ok := al.slice.m[key]; ok {
		return p, nil
	}
	keep := func(p netip.Prefix) netip.Prefix {
		if al.slice.m == nil {
			al.slice.m = map[string]netip.Prefix{}
		}
		al.slice.m[key] = p
		return p
	}
	field := "node_slice_size"
	if implicit {
		field = DefaultSliceFlag
	}
	if al.Node == "" {
		return netip.Prefix{}, badRequest("%s: the agent does not know its node name (--node-name)", field)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		sp, err := al.B.GetSlicePool(ctx, name)
		if errors.Is(err, ErrNotFound) {
			slices, derr := wbpool.DivideRange(rng, size)
			if derr != nil {
				return netip.Prefix{}, badRequest("%s: %v", field, derr)
			}
			sp = &SlicePool{Name: name, Range: rng.String(), SliceSize: size}
			for _, s := range slices {
				sp.Slices = append(sp.Slices, Slice{Range: s.String()})
			}
			if err := al.B.CreateSlicePool(ctx, sp); err != nil && !errors.Is(err, ErrExists) {
				return netip.Prefix{}, apiErr(err, "create NodeSlicePool %s", name)
			}
			continue
		}
		if err != nil {
			return netip.Prefix{}, apiErr(err, "read NodeSlicePool %s", name)
		}
		if implicit && sp.Range != rng.String() {
			al.logger().Info("cluster IPAM: the network keeps its plain pool: "+DefaultSliceFlag+" does not apply", "network", req.Network, "network_name", req.NetworkName, "range", rng,
				"why", fmt.Sprintf("NodeSlicePool %s divides another range, %s (give the network a network_name of its own to slice it)", name, sp.Range))
			return keep(netip.Prefix{}), nil
		}
		if !implicit && (sp.Range != rng.String() || normSize(sp.SliceSize) != normSize(size)) {
			return netip.Prefix{}, badRequest("NodeSlicePool %s divides %s into %s slices, but this network says range %s, node_slice_size %s: give networks of one network_name the same range and slice size",
				name, sp.Range, sp.SliceSize, rng, size)
		}
		free := -1
		for i, s := range sp.Slices {
			if s.Node == al.Node {
				p, err := netip.ParsePrefix(s.Range)
				if err != nil {
					return netip.Prefix{}, apiErr(err, "NodeSlicePool %s slice %q", name, s.Range)
				}
				return keep(p), nil
			}
			if s.Node == "" && free < 0 {
				free = i
			}
		}
		if free < 0 {
			fix := "use a smaller node_slice_size or a larger range"
			if implicit {
				fix = "use a smaller " + DefaultSliceFlag + " (the agents' slice size for networks without node_slice_size) or a larger range, or give the network a smaller node_slice_size"
			}
			return netip.Prefix{}, &agentapi.Error{Reason: agentapi.ReasonExhausted, Msg: fmt.Sprintf("NodeSlicePool %s: all %d slices of %s are leased to other nodes: %s", name, len(sp.Slices), sp.Range, fix)}
		}
		sp.Slices[free].Node = al.Node
		if err := al.B.UpdateSlicePool(ctx, sp); err != nil && !errors.Is(err, ErrConflict) {
			return netip.Prefix{}, apiErr(err, "lease a slice of NodeSlicePool %s", name)
		}
	}
	return netip.Prefix{}, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("NodeSlicePool %s: still changed by other writers after %d attempts", name, maxAttempts)}
}

func normSize(s string) string {
	if len(s) > 0 && s[0] == '/' {
		return s[1:]
	}
	return s
}
