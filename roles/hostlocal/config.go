package hostlocal

import (
	"fmt"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// config is the host-local part of a plugin config, validated.
type config struct {
	ipamrole.Pool
	Sets       []ipam.RangeSet
	Routes     []ipamrole.Route
	ResolvConf string
}

// ipamJSON is the "ipam" section as written, with the reference plugin's
// fields (the embedded RangeConfig is the legacy single range).
type ipamJSON struct {
	Type string `json:"type"`
	ipam.RangeConfig
	Ranges        [][]ipam.RangeConfig `json:"ranges"`
	RangeFromFile string               `json:"rangeFromFile"`
	Routes        []ipamrole.RouteJSON `json:"routes"`
	DataDir       string               `json:"dataDir"`
	ResolvConf    string               `json:"resolvConf"`
	Sticky        bool                 `json:"sticky"`
	// reclaimAfterReboot, decoded here so that a value that is not true
	// or false is refused as every wrong type is (reclaimOn reads it).
	reclaimJSON
}

// loadOptions say how much of the config a verb needs.
type loadOptions struct {
	// ranges: the verb needs the range sets, so read rangeFromFile and
	// require at least one. DEL and GC release by owner and need neither
	// (a file that is gone must not stop a DEL).
	ranges bool
}

// loadRanges is loadConfig for the verbs that need the range sets (ADD,
// CHECK, STATUS).
func loadRanges(a *cniplug.Args) (*config, error) { return loadConfig(a, loadOptions{ranges: true}) }

// loadOwners is loadConfig for the verbs that release by owner (DEL, GC).
func loadOwners(a *cniplug.Args) (*config, error) { return loadConfig(a, loadOptions{}) }

// loadConfig reads and validates the "ipam" section of a.StdinData. The
// ipRanges capability (runtimeConfig.ipRanges), when given, replaces the
// configured ranges; otherwise the legacy single range (ipam.subnet ...) comes
// first, then ipam.ranges, and ipam.rangeFromFile only when both are absent.
func loadConfig(a *cniplug.Args, opt loadOptions) (*config, error) {
	in, err := ipamrole.Section[ipamJSON](a, "host-local reads its ranges")
	if err != nil {
		return nil, err
	}
	cfg := &config{
		Pool:       ipamrole.Pool{Role: roleName, Network: a.Conf.Name, DataDir: in.DataDir, Sticky: in.Sticky, JoinCaller: true},
		ResolvConf: in.ResolvConf,
	}
	if cfg.Routes, err = ipamrole.ParseRoutes("ipam.routes", in.Routes); err != nil {
		return nil, err
	}
	if cfg.Sets, err = rangeSets(a, in, opt); err != nil {
		return nil, err
	}
	return cfg, nil
}

// rangeSets gathers and canonicalizes the range sets from their sources.
func rangeSets(a *cniplug.Args, in *ipamJSON, opt loadOptions) ([]ipam.RangeSet, error) {
	type source struct {
		field string // config path of the set, e.g. "ipam.ranges[0]"
		set   []ipam.RangeConfig
		whole bool // the set is one object (legacy, rangeFromFile), not a list
	}
	var srcs []source
	if len(a.Conf.RuntimeConfig.IPRanges) > 0 && string(a.Conf.RuntimeConfig.IPRanges) != "null" {
		var capRanges [][]ipam.RangeConfig
		if err := ipamrole.Decode("runtimeConfig.ipRanges", a.Conf.RuntimeConfig.IPRanges, &capRanges); err != nil {
			return nil, err
		}
		for i, s := range capRanges {
			srcs = append(srcs, source{field: fmt.Sprintf("runtimeConfig.ipRanges[%d]", i), set: s})
		}
	}
	if len(srcs) == 0 {
		if !in.RangeConfig.IsZero() {
			if in.Subnet == "" {
				return nil, cniplug.ConfError("ipam.subnet", "missing: ipam.rangeStart, rangeEnd and gateway belong to a range with ipam.subnet (or move them into ipam.ranges)")
			}
			srcs = append(srcs, source{field: "ipam", set: []ipam.RangeConfig{in.RangeConfig}, whole: true})
		}
		for i, s := range in.Ranges {
			srcs = append(srcs, source{field: fmt.Sprintf("ipam.ranges[%d]", i), set: s})
		}
	}
	if len(srcs) == 0 && in.RangeFromFile != "" {
		if !opt.ranges {
			return nil, nil
		}
		b, err := conffile.Read(in.RangeFromFile, ipamrole.MaxFile)
		if err != nil {
			return nil, cniplug.ConfError("ipam.rangeFromFile", "cannot read %q: %v: fix the path or configure ipam.ranges", in.RangeFromFile, err)
		}
		var rc ipam.RangeConfig
		if err := ipamrole.Decode("ipam.rangeFromFile "+in.RangeFromFile, b, &rc); err != nil {
			return nil, err
		}
		if rc.Subnet == "" {
			return nil, cniplug.ConfError("ipam.rangeFromFile", "%q holds no \"subnet\": it must hold one range, e.g. {\"subnet\": \"10.1.0.0/24\"}", in.RangeFromFile)
		}
		if _, err := rc.Parse("ipam.rangeFromFile"); err != nil {
			// Parse quotes the bad value; the file may be any file.
			return nil, cniplug.ConfError("ipam.rangeFromFile", "%q holds a range whose subnet, rangeStart, rangeEnd or gateway is not an address or subnet (its values are not repeated here): fix the file", in.RangeFromFile)
		}
		srcs = append(srcs, source{field: "ipam.rangeFromFile", set: []ipam.RangeConfig{rc}, whole: true})
	}
	if len(srcs) == 0 {
		if !opt.ranges {
			return nil, nil
		}
		return nil, cniplug.ConfError("ipam.ranges", "missing: host-local needs at least one range, e.g. \"ranges\": [[{\"subnet\": \"10.1.0.0/24\"}]]")
	}

	// field names range i of source set s: "ipam.ranges[0][1]", or "ipam"
	// for the legacy range.
	field := func(s, i int) string {
		if srcs[s].whole {
			return srcs[s].field
		}
		return fmt.Sprintf("%s[%d]", srcs[s].field, i)
	}
	sets := make([]ipam.RangeSet, len(srcs))
	for s, src := range srcs {
		sets[s] = make(ipam.RangeSet, len(src.set))
		for i, rc := range src.set {
			r, err := rc.Parse(field(s, i))
			if err != nil {
				return nil, err
			}
			sets[s][i] = r
		}
	}
	if err := ipam.Canonicalize(sets, field); err != nil {
		return nil, err
	}
	return sets, nil
}
