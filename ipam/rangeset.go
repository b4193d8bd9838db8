package ipam

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
)

// RangeSet is a list of ranges of one family; an attachment gets one address
// per set (a dual-stack network has an IPv4 set and an IPv6 set).
type RangeSet []Range

// ID identifies the set's round-robin cursor in the store: its ranges, so a
// changed set starts a fresh cursor.
func (s RangeSet) ID() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// String lists the set's ranges, e.g. "10.1.0.1-10.1.0.254, 10.2.0.1-10.2.0.254".
func (s RangeSet) String() string { return strings.ReplaceAll(s.ID(), ",", ", ") }

// Range returns the range that contains a.
func (s RangeSet) Range(a netip.Addr) (Range, bool) {
	for _, r := range s {
		if r.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}

// Contains reports whether one of the set's ranges contains a.
func (s RangeSet) Contains(a netip.Addr) bool {
	_, ok := s.Range(a)
	return ok
}

// FieldFunc names range i of set for error messages, e.g. "ipam.ranges[0][1]".
type FieldFunc func(set, i int) string

// RangesField is the FieldFunc of a list of range sets at the config path
// base, e.g. RangesField("ipam.ranges").
func RangesField(base string) FieldFunc {
	return func(set, i int) string { return fmt.Sprintf("%s[%d][%d]", base, set, i) }
}

// Canonicalize canonicalizes every range (Range.Canonicalize) and checks the
// sets together: every set has ranges of one family, and no two ranges
// overlap, within a set or across sets.
func Canonicalize(sets []RangeSet, field FieldFunc) error {
	for si, set := range sets {
		if len(set) == 0 {
			return cniplug.ConfError(strings.TrimSuffix(field(si, 0), "[0]"), "an empty range set: give it at least one {\"subnet\": ...} or remove it")
		}
		for i := range set {
			if err := set[i].Canonicalize(field(si, i)); err != nil {
				return err
			}
			if set[i].Subnet.Addr().Is4() != set[0].Subnet.Addr().Is4() {
				return cniplug.ConfError(field(si, i)+".subnet", "%s is not of the same IP family as %s in the same range set: put IPv4 and IPv6 ranges in separate sets", set[i].Subnet, set[0].Subnet)
			}
		}
	}
	type at struct{ set, i int }
	var all []at
	for si, set := range sets {
		for i := range set {
			all = append(all, at{si, i})
		}
	}
	for x := range all {
		for y := x + 1; y < len(all); y++ {
			p, q := all[x], all[y]
			if rp, rq := sets[p.set][p.i], sets[q.set][q.i]; rp.Overlaps(rq) {
				return cniplug.ConfError(field(q.set, q.i), "range %s overlaps range %s of %s: ranges must not share addresses; shrink one with rangeStart/rangeEnd", rq, rp, field(p.set, p.i))
			}
		}
	}
	return nil
}

// RangeConfig is a range as the reference host-local plugin's config writes
// it: {"subnet", "rangeStart", "rangeEnd", "gateway"}.
type RangeConfig struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
}

// IsZero reports whether no field is set.
func (c RangeConfig) IsZero() bool { return c == RangeConfig{} }

// Parse parses the strings of c (not yet canonicalized). field names c in
// error messages.
func (c RangeConfig) Parse(field string) (Range, error) {
	var r Range
	if c.Subnet != "" {
		p, err := netip.ParsePrefix(strings.TrimSpace(c.Subnet))
		if err != nil {
			return r, cniplug.ConfError(field+".subnet", "%q is not a subnet in CIDR notation (want e.g. 10.1.0.0/24 or fd00:1::/64)", c.Subnet)
		}
		r.Subnet = p
	}
	for _, p := range []struct {
		name, s string
		dst     *netip.Addr
	}{
		{"rangeStart", c.RangeStart, &r.Start},
		{"rangeEnd", c.RangeEnd, &r.End},
		{"gateway", c.Gateway, &r.Gateway},
	} {
		if p.s == "" {
			continue
		}
		a, err := netip.ParseAddr(strings.TrimSpace(p.s))
		if err != nil {
			return r, cniplug.ConfError(field+"."+p.name, "%q is not an IP address (want e.g. 10.1.0.10 or fd00:1::10)", p.s)
		}
		*p.dst = a
	}
	return r, nil
}

// ParseSets parses and canonicalizes range sets written as the reference
// host-local plugin's "ranges" (a list of lists of RangeConfig). base is the
// config path of the list, e.g. "ipam.ranges".
func ParseSets(base string, in [][]RangeConfig) ([]RangeSet, error) {
	field := RangesField(base)
	sets := make([]RangeSet, len(in))
	for si, set := range in {
		sets[si] = make(RangeSet, len(set))
		for i, rc := range set {
			r, err := rc.Parse(field(si, i))
			if err != nil {
				return nil, err
			}
			sets[si][i] = r
		}
	}
	if err := Canonicalize(sets, field); err != nil {
		return nil, err
	}
	return sets, nil
}
