package whereabouts

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// rangeJSON is a range as whereabouts writes it: at the top of "ipam" or as
// an entry of "ipRanges".
type rangeJSON struct {
	Range      string   `json:"range"`
	RangeStart string   `json:"range_start"`
	RangeEnd   string   `json:"range_end"`
	Exclude    []string `json:"exclude"`
}

// addressJSON is an entry of "addresses" (a static address).
type addressJSON struct {
	Address string `json:"address"`
	Gateway string `json:"gateway"`
}

// ipamJSON is whereabouts v0.9.4's "ipam" section (pkg/types.IPAMConfig),
// every field, plus cnibox's own.
type ipamJSON struct {
	Type string `json:"type"`
	rangeJSON
	IPRanges      []rangeJSON          `json:"ipRanges"`
	NetworkName   string               `json:"network_name"`
	Overlapping   *bool                `json:"enable_overlapping_ranges"`
	NodeSliceSize string               `json:"node_slice_size"`
	Gateway       string               `json:"gateway"`
	Routes        []ipamrole.RouteJSON `json:"routes"`
	DNS           types.DNS            `json:"dns"`
	Addresses     []addressJSON        `json:"addresses"`
	LogFile       string               `json:"log_file"`
	LogLevel      string               `json:"log_level"`

	// Accepted and without effect in cnibox (docs/roles/whereabouts.md):
	// the agent holds the API credentials, elects its own leader and
	// reclaims leaks itself.
	Kubernetes struct {
		Kubeconfig string `json:"kubeconfig"`
		APIRoot    string `json:"k8s_api_root"`
	} `json:"kubernetes"`
	ConfigurationPath        string `json:"configuration_path"`
	Datastore                string `json:"datastore"`
	EtcdHost                 string `json:"etcd_host"`
	EtcdUsername             string `json:"etcd_username"`
	EtcdPassword             string `json:"etcd_password"`
	EtcdKeyFile              string `json:"etcd_key_file"`
	EtcdCertFile             string `json:"etcd_cert_file"`
	EtcdCACertFile           string `json:"etcd_ca_cert_file"`
	LeaderLeaseDuration      int    `json:"leader_lease_duration"`
	LeaderRenewDeadline      int    `json:"leader_renew_deadline"`
	LeaderRetryPeriod        int    `json:"leader_retry_period"`
	SleepForRace             int    `json:"sleep_for_race"`
	ReconcilerCronExpression string `json:"reconciler_cron_expression"`

	// cnibox's own.
	AgentSocket string `json:"agentSocket"`
	DataDir     string `json:"dataDir"`
	Sticky      *bool  `json:"sticky"`
}

// config is the whereabouts "ipam" section, validated.
type config struct {
	Network       string // the config's name
	NetworkName   string
	Ranges        []wbpool.Range
	Overlapping   bool
	NodeSliceSize string
	Sticky        bool
	Gateway       netip.Addr
	Routes        []ipamrole.Route
	DNS           types.DNS
	Addresses     []ipamrole.Address // static, not reserved anywhere
	LogFile       string
	LogLevel      string
	Socket        string
	DataDir       string
}

// loadConfig reads the "ipam" section of a.StdinData, filled in from
// whereabouts' flat file (whereabouts.d/whereabouts.conf) where it is
// silent, as whereabouts does.
func loadConfig(a *cniplug.Args) (*config, error) {
	in, err := ipamrole.Section[ipamJSON](a, "whereabouts reads its range")
	if err != nil {
		return nil, err
	}
	if err := mergeFlatFile(in); err != nil {
		return nil, err
	}
	cfg := &config{
		Network:       a.Conf.Name,
		NetworkName:   strings.TrimSpace(in.NetworkName),
		Overlapping:   in.Overlapping == nil || *in.Overlapping, // whereabouts' default: on
		NodeSliceSize: strings.TrimSpace(in.NodeSliceSize),
		Sticky:        in.Sticky == nil || *in.Sticky,
		DNS:           in.DNS,
		LogFile:       in.LogFile,
		LogLevel:      in.LogLevel,
		Socket:        in.AgentSocket,
		DataDir:       in.DataDir,
	}
	if cfg.Socket == "" {
		cfg.Socket = agentapi.DefaultSocket
	}
	if cfg.NetworkName != "" {
		if err := agentapi.CheckNames("default", cfg.NetworkName); err != nil {
			return nil, cniplug.ConfError("ipam.network_name", "%q: it prefixes object names, so it must be a DNS-1123 label (lower case letters, digits, '-')", cfg.NetworkName)
		}
	}
	if err := cfg.parseRanges(in); err != nil {
		return nil, err
	}
	if cfg.NodeSliceSize != "" {
		if len(cfg.Ranges) != 1 {
			return nil, cniplug.ConfError("ipam.node_slice_size", "node slices take exactly one range (have %d), as whereabouts' node slice controller: drop ipRanges or node_slice_size", len(cfg.Ranges))
		}
		if _, err := wbpool.DivideRange(cfg.Ranges[0].Prefix, cfg.NodeSliceSize); err != nil {
			return nil, cniplug.ConfError("ipam.node_slice_size", "%v", err)
		}
	}
	if in.Gateway != "" {
		gw, err := netip.ParseAddr(strings.TrimSpace(in.Gateway))
		if err != nil {
			return nil, cniplug.ConfError("ipam.gateway", "%q is not an IP address (want e.g. 10.1.0.1)", in.Gateway)
		}
		cfg.Gateway = gw.Unmap()
	}
	if cfg.Routes, err = ipamrole.ParseRoutes("ipam.routes", in.Routes); err != nil {
		return nil, err
	}
	for i, ad := range in.Addresses {
		f := fmt.Sprintf("ipam.addresses[%d]", i)
		p, err := netip.ParsePrefix(strings.TrimSpace(ad.Address))
		if err != nil {
			return nil, cniplug.ConfError(f+".address", "%q is not an address in CIDR notation (want e.g. 10.1.0.5/24)", ad.Address)
		}
		addr := ipamrole.Address{Addr: netip.PrefixFrom(p.Addr().Unmap(), p.Bits())}
		if ad.Gateway != "" {
			if addr.Gateway, err = netip.ParseAddr(strings.TrimSpace(ad.Gateway)); err != nil {
				return nil, cniplug.ConfError(f+".gateway", "%q is not an IP address", ad.Gateway)
			}
		}
		cfg.Addresses = append(cfg.Addresses, addr)
	}
	if len(cfg.Ranges) == 0 && len(cfg.Addresses) == 0 {
		return nil, cniplug.ConfError("ipam.range", "missing: whereabouts needs a range, e.g. \"range\": \"192.168.2.0/24\" (or \"ipRanges\", or static \"addresses\")")
	}
	if err := checkVersion(a, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseRanges reads "range" (first) and "ipRanges" as whereabouts'
// LoadIPAMConfig does: "a-b/nn" is the range nn with range_start a and
// range_end b; a CIDR with host bits is its network.
func (cfg *config) parseRanges(in *ipamJSON) error {
	type src struct {
		field string
		r     rangeJSON
	}
	var srcs []src
	if in.Range != "" {
		srcs = append(srcs, src{"ipam", in.rangeJSON})
	} else if in.RangeStart != "" || in.RangeEnd != "" || len(in.Exclude) > 0 {
		return cniplug.ConfError("ipam.range", "missing: range_start, range_end and exclude belong to a \"range\" (or move them into an ipRanges entry)")
	}
	for i, r := range in.IPRanges {
		srcs = append(srcs, src{fmt.Sprintf("ipam.ipRanges[%d]", i), r})
	}
	for _, s := range srcs {
		r, err := parseRange(s.field, s.r)
		if err != nil {
			return err
		}
		for _, have := range cfg.Ranges {
			if have.Prefix.Overlaps(r.Prefix) {
				return cniplug.ConfError(s.field+".range", "%s overlaps %s: each range must be its own subnet", r.Prefix, have.Prefix)
			}
		}
		cfg.Ranges = append(cfg.Ranges, r)
	}
	return nil
}

func parseRange(field string, in rangeJSON) (wbpool.Range, error) {
	var r wbpool.Range
	spec := strings.TrimSpace(in.Range)
	if spec == "" {
		return r, cniplug.ConfError(field+".range", "missing: want a CIDR (\"192.168.2.0/24\") or a-b/nn (\"192.168.2.225-192.168.2.230/24\")")
	}
	addr := func(f, s string) (netip.Addr, error) {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return a, cniplug.ConfError(f, "%q is not an IP address", s)
		}
		return a.Unmap(), nil
	}
	var err error
	if in.RangeStart != "" {
		if r.Start, err = addr(field+".range_start", in.RangeStart); err != nil {
			return r, err
		}
	}
	if in.RangeEnd != "" {
		if r.End, err = addr(field+".range_end", in.RangeEnd); err != nil {
			return r, err
		}
	}
	if first, rest, ok := strings.Cut(spec, "-"); ok {
		// a-b/nn: b/nn is the CIDR, a and b the range's ends.
		if r.Start, err = addr(field+".range", first); err != nil {
			return r, cniplug.ConfError(field+".range", "%q: the start %q of a-b/nn is not an IP address", spec, first)
		}
		p, perr := netip.ParsePrefix(strings.TrimSpace(rest))
		if perr != nil {
			return r, cniplug.ConfError(field+".range", "%q: %q is not an address with a prefix length (want a-b/nn, e.g. 192.168.2.225-192.168.2.230/24)", spec, rest)
		}
		r.End = p.Addr().Unmap()
		r.Prefix = netip.PrefixFrom(r.End, p.Bits()).Masked()
		if !r.Prefix.Contains(r.Start) {
			return r, cniplug.ConfError(field+".range", "%q: the start %s lies outside %s", spec, r.Start, r.Prefix)
		}
	} else {
		p, perr := netip.ParsePrefix(spec)
		if perr != nil {
			return r, cniplug.ConfError(field+".range", "%q is not a CIDR (want e.g. 192.168.2.0/24 or fd00:10::/64)", spec)
		}
		r.Prefix = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
	}
	if _, _, err := r.Bounds(); err != nil {
		return r, cniplug.ConfError(field+".range", "%s has no address to hand out (whereabouts skips the network and the last address): use a /30 or larger (IPv6 /126)", r.Prefix)
	}
	for _, x := range []struct {
		name string
		a    netip.Addr
	}{{"range_start", r.Start}, {"range_end", r.End}} {
		if x.a.IsValid() && x.a.Is4() != r.Prefix.Addr().Is4() {
			return r, cniplug.ConfError(field+"."+x.name, "%s is not of the family of %s", x.a, r.Prefix)
		}
	}
	for i, s := range in.Exclude {
		p, err := wbpool.ParseExclude(s)
		if err != nil {
			return r, cniplug.ConfError(fmt.Sprintf("%s.exclude[%d]", field, i), "%v (want e.g. 192.168.2.229/30 or 192.168.2.1)", err)
		}
		r.Exclude = append(r.Exclude, p)
	}
	return r, nil
}

// checkVersion: CNI 0.2.0 and older carry one address per family.
func checkVersion(a *cniplug.Args, cfg *config) error {
	switch a.Conf.CNIVersion {
	case "", "0.1.0", "0.2.0":
	default:
		return nil
	}
	var v4, v6 int
	for _, r := range cfg.Ranges {
		if r.Prefix.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return cniplug.Errorf(types.ErrIncompatibleCNIVersion, "CNI version %q carries one address per family; ipam has %d IPv4 and %d IPv6 ranges: use cniVersion 0.3.0 or later", a.Conf.CNIVersion, v4, v6)
	}
	return nil
}

// request is the agent call for the attachment, for ADD with the addresses
// the runtime asks for (CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips), each
// of which must lie in a range.
func (cfg *config) request(a *cniplug.Args) (*agentapi.IPAMRequest, error) {
	req := cfg.attachment(a)
	if a.Command != "ADD" {
		return req, nil
	}
	want, err := a.RequestedIPs()
	if err != nil {
		return nil, err
	}
	for _, ip := range want {
		in := false
		for _, r := range cfg.Ranges {
			in = in || r.Usable(ip)
		}
		if !in {
			return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "requested address %s (CNI_ARGS IP, args.cni.ips or the ips capability) is in no range of ipam (%s): ask for an address between range_start and range_end, not excluded", ip, cfg.rangeList())
		}
		req.Requested = append(req.Requested, ip.String())
	}
	return req, nil
}

// attachment is the agent call for the attachment: its pod, network and
// ranges, no requested addresses.
func (cfg *config) attachment(a *cniplug.Args) *agentapi.IPAMRequest {
	req := &agentapi.IPAMRequest{
		ContainerID:   a.ContainerID,
		IfName:        a.IfName,
		PodRef:        podRef(a),
		PodUID:        string(a.CNIArgs.K8S_POD_UID),
		Network:       cfg.Network,
		NetworkName:   cfg.NetworkName,
		Overlapping:   cfg.Overlapping,
		NodeSliceSize: cfg.NodeSliceSize,
		Sticky:        cfg.Sticky,
	}
	for _, r := range cfg.Ranges {
		ar := agentapi.IPAMRange{Range: r.Prefix.String()}
		if r.Start.IsValid() {
			ar.Start = r.Start.String()
		}
		if r.End.IsValid() {
			ar.End = r.End.String()
		}
		for _, x := range r.Exclude {
			ar.Exclude = append(ar.Exclude, x.String())
		}
		req.Ranges = append(req.Ranges, ar)
	}
	return req
}

// ask sends op for the attachment (CHECK, DEL, GC: no requested addresses;
// edit, when not nil, completes the call) to the agent, waiting at most
// timeout (0: agentapi's default).
func (cfg *config) ask(ctx context.Context, a *cniplug.Args, op string, timeout time.Duration, edit func(*agentapi.IPAMRequest)) (*agentapi.IPAMRequest, *agentapi.IPAMResponse, error) {
	req := cfg.attachment(a)
	if edit != nil {
		edit(req)
	}
	resp, err := (&agentapi.Client{Socket: cfg.Socket, Timeout: timeout}).IPAM(ctx, op, req)
	return req, resp, err
}

func (cfg *config) rangeList() string {
	var s []string
	for _, r := range cfg.Ranges {
		first, last, _ := r.Bounds()
		s = append(s, fmt.Sprintf("%s-%s", first, last))
	}
	return strings.Join(s, ", ")
}

// podRef is whereabouts' podref: "namespace/name" of CNI_ARGS, "" without
// a pod name.
func podRef(a *cniplug.Args) string {
	if a.CNIArgs.K8S_POD_NAME == "" {
		return ""
	}
	return string(a.CNIArgs.K8S_POD_NAMESPACE) + "/" + string(a.CNIArgs.K8S_POD_NAME)
}
