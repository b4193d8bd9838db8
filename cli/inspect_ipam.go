package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/store"
)

// ipamPool is one address range (host-local) or pool (cloud IPAM).
type ipamPool struct {
	// Range is "start-end" for a range; a cloud pool lists its NIC.
	Range   string       `json:"range"`
	Subnet  netip.Prefix `json:"subnet,omitzero"`
	Gateway netip.Addr   `json:"gateway,omitzero"`
	// Source: the config file that defines the range, "store" for a range
	// known only from the store's round-robin cursor, or "cloud <provider>".
	Source string `json:"source"`
	poolUse
	// LastAllocated is the round-robin position: the next ADD gets the first
	// free address after it.
	LastAllocated netip.Addr `json:"lastAllocated,omitzero"`
	// Refreshed is when the cloud provider last answered (cloud pools only).
	Refreshed time.Time `json:"refreshed,omitzero"`
	// LastError is why the last cloud query failed (cloud pools only).
	LastError string `json:"lastError,omitempty"`

	start, end netip.Addr
}

// poolUse is how full a pool is.
type poolUse struct {
	// Size is how many addresses can be handed out (gateway excluded),
	// saturating at 2^64-1.
	Size uint64 `json:"size"`
	Used uint64 `json:"used"`
	Free uint64 `json:"free"`
}

// usage is a pool of size addresses with used of them taken.
func usage(size, used uint64) poolUse {
	return poolUse{Size: size, Used: used, Free: size - min(used, size)}
}

// ipamReservation is one reserved address and what is known of its owner.
type ipamReservation struct {
	Addr        netip.Addr   `json:"addr"`
	Subnet      netip.Prefix `json:"subnet,omitzero"`
	ContainerID string       `json:"containerID"`
	IfName      string       `json:"ifName"`
	Pod         string       `json:"pod,omitempty"`
	Created     time.Time    `json:"created,omitzero"`
	BootID      string       `json:"bootID,omitempty"`
	// EarlierBoot: reserved before the node's last reboot.
	EarlierBoot bool `json:"earlierBoot,omitempty"`
	// Endpoint: an endpoint record exists for the owner (container, ifname)
	// in this network; its netns follows.
	Endpoint bool   `json:"endpoint"`
	Netns    string `json:"netns,omitempty"`
}

// ipamNetwork is `cnibox inspect ipam` for one network.
type ipamNetwork struct {
	Network      string                  `json:"network"`
	Pools        []ipamPool              `json:"pools"`
	Reservations []ipamReservation       `json:"reservations"`
	Sticky       map[string][]netip.Addr `json:"sticky,omitempty"`
}

func (o Options) runInspectIPAM(c *ucli.Context) error {
	nets, err := collectIPAM(c, o.Registry)
	if err != nil {
		return err
	}
	return show(c, nets, printIPAM, nil)
}

// configuredRanges returns the host-local ranges of the loadable configs in
// confDir by network name, with the file that defines them. The first file
// that defines a network wins, as for a runtime.
func configuredRanges(confDir string) map[string][]ipamPool {
	out := map[string][]ipamPool{}
	files, _ := libcni.ConfFiles(confDir, nodestate.ConfExtensions)
	sort.Strings(files)
	for _, f := range files {
		l, err := nodestate.LoadConfFile(f)
		if err != nil || len(l.Plugins) == 0 {
			continue
		}
		if _, seen := out[l.Name]; seen {
			continue
		}
		for _, p := range l.Plugins {
			sets := rangesOf(p.Bytes)
			for _, set := range sets {
				for _, r := range set {
					out[l.Name] = append(out[l.Name], ipamPool{
						Range: r.String(), Subnet: r.Subnet, Gateway: r.Gateway, Source: f, start: r.Start, end: r.End,
					})
				}
			}
		}
	}
	return out
}

// rangesOf parses the host-local ranges of one plugin config (legacy single
// range or "ranges"); nil when it has none or they do not parse.
func rangesOf(conf []byte) []ipam.RangeSet {
	var c struct {
		IPAM *struct {
			ipam.RangeConfig
			Ranges [][]ipam.RangeConfig `json:"ranges"`
		} `json:"ipam"`
	}
	if json.Unmarshal(conf, &c) != nil || c.IPAM == nil {
		return nil
	}
	var in [][]ipam.RangeConfig
	if !c.IPAM.RangeConfig.IsZero() {
		in = append(in, []ipam.RangeConfig{c.IPAM.RangeConfig})
	}
	in = append(in, c.IPAM.Ranges...)
	if len(in) == 0 {
		return nil
	}
	sets, err := ipam.ParseSets("ipam.ranges", in)
	if err != nil {
		return nil
	}
	return sets
}

// rangesOfSetID parses a range-set ID ("a-b,c-d") back into ranges.
func rangesOfSetID(id string) []ipamPool {
	var out []ipamPool
	for _, part := range strings.Split(id, ",") {
		s, e, ok := strings.Cut(part, "-")
		if !ok {
			continue
		}
		start, err1 := netip.ParseAddr(s)
		end, err2 := netip.ParseAddr(e)
		if err1 != nil || err2 != nil || start.BitLen() != end.BitLen() || end.Less(start) {
			continue
		}
		out = append(out, ipamPool{Range: part, Source: "store", start: start, end: end})
	}
	return out
}

// collectIPAM builds the view of every network with IPAM records or
// configured ranges (or just --network).
func collectIPAM(c *ucli.Context, reg *cniplug.Registry) ([]ipamNetwork, error) {
	only := c.String("network")
	configured := configuredRanges(c.String("conf-dir"))
	var views []store.IPAMView
	var eps []store.Endpoint
	byNet := map[string]*ipamNetwork{}
	err := readStore(c, func(st *store.Store) error {
		var err error
		if views, err = st.IPAMViews(only); err != nil {
			return err
		}
		if eps, err = st.Endpoints(only); err != nil {
			return err
		}
		names := map[string]bool{}
		for _, v := range views {
			names[v.Network] = true
		}
		for n := range configured {
			if only == "" || n == only {
				names[n] = true
			}
		}
		for n := range names {
			var view store.IPAMView
			for _, v := range views {
				if v.Network == n {
					view = v
				}
			}
			net := buildIPAMNetwork(reg, n, view, configured[n], eps)
			if err := st.ViewIPAM(n, func(tx *store.IPAMTx) error {
				countPools(tx, net.Pools)
				return nil
			}); err != nil {
				return err
			}
			byNet[n] = &net
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(byNet) == 0 { // no store yet: the configured ranges, all free
		for n, pools := range configured {
			if only != "" && n != only {
				continue
			}
			net := buildIPAMNetwork(reg, n, store.IPAMView{}, pools, nil)
			for i := range net.Pools {
				p := &net.Pools[i]
				p.poolUse = usage(rangeSize(p.start, p.end, p.Gateway), 0)
			}
			byNet[n] = &net
		}
	}
	out := make([]ipamNetwork, 0, len(byNet))
	for _, n := range byNet {
		out = append(out, *n)
	}
	out = append(out, clusterIPAMNetworks(c, only, eps)...)
	sort.Slice(out, func(i, j int) bool { return out[i].Network < out[j].Network })
	return out, nil
}

// buildIPAMNetwork merges the configured ranges, the ranges the store's
// cursors name, the pools IPAM roles keep beside the reservations (cloud
// IPAM's NICs: cniplug.Known.KeptPools) and the reservations of one
// network.
func buildIPAMNetwork(reg *cniplug.Registry, name string, v store.IPAMView, configured []ipamPool, eps []store.Endpoint) ipamNetwork {
	net := ipamNetwork{Network: name, Pools: []ipamPool{}, Reservations: []ipamReservation{}}
	net.Pools = append(net.Pools, configured...)
	have := func(r string) bool {
		return slices.ContainsFunc(net.Pools, func(p ipamPool) bool { return p.Range == r })
	}
	for _, cur := range v.Cursors {
		for _, p := range rangesOfSetID(cur.SetID) {
			if !have(p.Range) {
				net.Pools = append(net.Pools, p)
			}
		}
	}
	for i := range net.Pools {
		p := &net.Pools[i]
		for _, cur := range v.Cursors {
			if inRange(cur.Last, p.start, p.end) {
				p.LastAllocated = cur.Last
			}
		}
		if !p.Subnet.IsValid() { // a range known from the store only
			for _, r := range v.Reservations {
				if inRange(r.Addr, p.start, p.end) && r.Subnet.IsValid() {
					p.Subnet = r.Subnet
					break
				}
			}
		}
	}
	for _, kp := range reg.KeptPools(v.Kept) {
		pool := ipamPool{Range: kp.Range, Subnet: kp.Subnet, Source: kp.Source, Refreshed: kp.Refreshed, LastError: kp.LastError}
		var used uint64
		for _, r := range v.Reservations {
			if slices.Contains(kp.Addrs, r.Addr) {
				used++
			}
		}
		pool.poolUse = usage(uint64(len(kp.Addrs)), used)
		net.Pools = append(net.Pools, pool)
	}
	type key struct{ cid, ifname string }
	owners := map[key]store.Endpoint{}
	for _, ep := range eps {
		if ep.Network == name {
			owners[key{ep.ContainerID, ep.IfName}] = ep
		}
	}
	boot := store.BootID()
	for _, r := range v.Reservations {
		ir := ipamReservation{
			Addr: r.Addr, Subnet: r.Subnet, ContainerID: r.ContainerID, IfName: r.IfName, Pod: r.Pod,
			Created: r.Created, BootID: r.BootID, EarlierBoot: r.BootID != "" && boot != "" && r.BootID != boot,
		}
		if ep, ok := owners[key{r.ContainerID, r.IfName}]; ok {
			ir.Endpoint, ir.Netns = true, ep.Netns
		}
		net.Reservations = append(net.Reservations, ir)
	}
	if len(v.Sticky) > 0 {
		net.Sticky = v.Sticky
	}
	return net
}

func orEmpty(s, cond string) string {
	if cond == "" {
		return ""
	}
	return s
}

// countPools fills Size, Used and Free of the ranges (not the cloud pools,
// already counted) with the allocator's own count, as STATUS counts them.
func countPools(tx *store.IPAMTx, pools []ipamPool) {
	var sets []ipam.RangeSet
	var idx []int
	for i, p := range pools {
		if !p.start.IsValid() {
			continue
		}
		sets = append(sets, ipam.RangeSet{{Subnet: p.Subnet, Start: p.start, End: p.end, Gateway: p.Gateway}})
		idx = append(idx, i)
	}
	for j, u := range ipam.Usage(tx, sets) {
		pools[idx[j]].poolUse = usage(u.Capacity, u.Used)
	}
}

// rangeSize counts [start, end] minus the gateway when it is inside,
// saturating at MaxUint64.
func rangeSize(start, end, gw netip.Addr) uint64 {
	if !start.IsValid() || start.BitLen() != end.BitLen() || end.Less(start) {
		return 0
	}
	if start.Is4() {
		n := uint64(ipv4Int(end)-ipv4Int(start)) + 1
		if inRange(gw, start, end) {
			n--
		}
		return n
	}
	// IPv6: count in the low 64 bits unless the range is wider.
	a, b := start.As16(), end.As16()
	ah, bh := be64(a[:8]), be64(b[:8])
	al, bl := be64(a[8:]), be64(b[8:])
	if ah != bh || bl-al == ^uint64(0) {
		return ^uint64(0)
	}
	lo := bl - al + 1
	if inRange(gw, start, end) {
		lo--
	}
	return lo
}

func be64(b []byte) uint64 {
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

func ipv4Int(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// inRange reports whether a is in [lo, hi].
func inRange(a, lo, hi netip.Addr) bool {
	return a.IsValid() && lo.IsValid() && a.BitLen() == lo.BitLen() && !a.Less(lo) && !hi.Less(a)
}

func printIPAM(w io.Writer, nets []ipamNetwork) error {
	if len(nets) == 0 {
		fmt.Fprintln(w, "no address ranges configured or reserved")
		return nil
	}
	for i, n := range nets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "network %s\n", n.Network)
		tw := newTable(w)
		row(tw, "  RANGE", "SUBNET", "GATEWAY", "SIZE", "USED", "FREE", "LAST", "SOURCE")
		for _, p := range n.Pools {
			src := p.Source
			if !p.Refreshed.IsZero() {
				src += ", refreshed " + p.Refreshed.Local().Format("2006-01-02 15:04:05")
			}
			if p.LastError != "" {
				src += ", last error: " + p.LastError
			}
			row(tw, "  "+p.Range, prefixOrDash(p.Subnet), addrOrDash(p.Gateway), count(p.Size), count(p.Used), count(p.Free),
				addrOrDash(p.LastAllocated), src)
		}
		tw.Flush()
		if len(n.Reservations) == 0 {
			fmt.Fprintln(w, "  no reservations")
			continue
		}
		section(w, n.Reservations, []string{"  ADDRESS", "CONTAINER", "IFNAME", "POD", "ENDPOINT", "CREATED"}, func(r ipamReservation) []string {
			ep := "none"
			if r.Endpoint {
				ep = "yes"
			}
			created := "-"
			if !r.Created.IsZero() {
				created = r.Created.Local().Format("2006-01-02 15:04:05")
			}
			if r.EarlierBoot {
				created += " (earlier boot)"
			}
			return []string{"  " + r.Addr.String(), short(r.ContainerID), r.IfName, orDash(r.Pod), ep, created}
		})
	}
	return nil
}

func count(n uint64) string {
	if n == ^uint64(0) {
		return "2^64+"
	}
	return strconv.FormatUint(n, 10)
}

func prefixOrDash(p netip.Prefix) string {
	if !p.IsValid() {
		return "-"
	}
	return p.String()
}

func addrOrDash(a netip.Addr) string {
	if !a.IsValid() {
		return "-"
	}
	return a.String()
}
