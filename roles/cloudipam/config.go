package cloudipam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// EnvEndpoint overrides the provider's endpoint (the config's "endpoint" and
// the default): the host agent URL, the IMDS base URL or the pool file.
const EnvEndpoint = "CNIBOX_CLOUD_ENDPOINT"

// Defaults.
const (
	AzureEndpoint          = "http://168.63.129.16/machine/plugins?comp=nmagent&type=getinterfaceinfov1"
	AWSEndpoint            = "http://169.254.169.254"
	AzureDNS               = "168.63.129.16"
	AWSDNS                 = "169.254.169.253"
	DefaultQueryInterval   = 10 * time.Second
	DefaultConnectTimeout  = 2 * time.Second
	DefaultResponseTimeout = 5 * time.Second
	// MaxAnswer caps what is read of a provider's answer.
	MaxAnswer = 1 << 20
)

// Provider names.
const (
	ProviderAzure = "azure"
	ProviderAWS   = "aws"
	ProviderFile  = "file"
)

// config is the cloud IPAM part of a plugin config, validated. Its pool
// never joins the caller's store: a call may ask the provider while it
// holds the store.
type config struct {
	ipamrole.Pool
	Provider string
	// Endpoint is what is queried: $CNIBOX_CLOUD_ENDPOINT, else the
	// config's "endpoint", else the provider's default.
	Endpoint        string
	Master          string       // pin the NIC by interface name
	Subnet          netip.Prefix // only the pools of this subnet; zero: all
	QueryInterval   time.Duration
	ConnectTimeout  time.Duration
	ResponseTimeout time.Duration
	DNS             types.DNS
	Routes          []*types.Route // nil: a default route via the gateway per family
}

type ipamJSON struct {
	Type            string          `json:"type"`
	Provider        string          `json:"provider"`
	Endpoint        string          `json:"endpoint"`
	Master          string          `json:"master"`
	Subnet          string          `json:"subnet"`
	QueryInterval   json.RawMessage `json:"queryInterval"`
	ConnectTimeout  json.RawMessage `json:"connectTimeout"`
	ResponseTimeout json.RawMessage `json:"responseTimeout"`
	DNS             *types.DNS      `json:"dns"`
	Routes          json.RawMessage `json:"routes"`
	Sticky          bool            `json:"sticky"`
	DataDir         string          `json:"dataDir"`
}

// loadConfig reads the "ipam" section of stdin (and the top-level "master"
// that Azure's configs carry). fixed is the provider a role answers for
// ("" for cloud-ipam, which needs "provider").
func loadConfig(a *cniplug.Args, fixed string) (*config, error) {
	var raw struct {
		Master string    `json:"master"`
		IPAM   *ipamJSON `json:"ipam"`
	}
	if err := cniplug.DecodeConf("cloud IPAM config", a.StdinData, &raw); err != nil {
		return nil, err
	}
	if raw.IPAM == nil {
		return nil, cniplug.ConfError("ipam", "missing: cloud IPAM reads its settings from the plugin config's \"ipam\" section")
	}
	in := raw.IPAM
	c := &config{
		Pool:     ipamrole.Pool{Role: a.Conf.IPAM.Type, Network: a.Conf.Name, DataDir: in.DataDir, Sticky: in.Sticky, Released: pruneCache},
		Master:   in.Master,
		Provider: in.Provider,
	}
	if c.Master == "" {
		c.Master = raw.Master
	}
	switch {
	case fixed != "" && c.Provider != "" && c.Provider != fixed:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, "config field \"ipam.provider\": %q is not supported by %s, which only asks the %s provider: remove the field, or use \"type\": \"cloud-ipam\"", c.Provider, a.Conf.IPAM.Type, fixed)
	case fixed != "":
		c.Provider = fixed
	}
	switch c.Provider {
	case ProviderAzure, ProviderAWS, ProviderFile:
	case "":
		return nil, cniplug.ConfError("ipam.provider", "missing: set it to \"azure\", \"aws\" or \"file\"")
	default:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, "config field \"ipam.provider\": %q is not supported: use \"azure\", \"aws\" or \"file\"", c.Provider)
	}
	if err := c.endpoint(a.Getenv, in.Endpoint); err != nil {
		return nil, err
	}
	if in.Subnet != "" {
		p, err := netip.ParsePrefix(strings.TrimSpace(in.Subnet))
		if err != nil || p.Masked() != p {
			return nil, cniplug.ConfError("ipam.subnet", "%q is not a subnet in CIDR notation (want e.g. 10.240.0.0/16): it picks the NIC subnet pods get addresses from", in.Subnet)
		}
		c.Subnet = p
	}
	for _, d := range []struct {
		field string
		raw   json.RawMessage
		def   time.Duration
		dst   *time.Duration
		zero  bool
	}{
		{"ipam.queryInterval", in.QueryInterval, DefaultQueryInterval, &c.QueryInterval, true},
		{"ipam.connectTimeout", in.ConnectTimeout, DefaultConnectTimeout, &c.ConnectTimeout, false},
		{"ipam.responseTimeout", in.ResponseTimeout, DefaultResponseTimeout, &c.ResponseTimeout, false},
	} {
		v, err := parseDuration(d.field, d.raw, d.def, d.zero)
		if err != nil {
			return nil, err
		}
		*d.dst = v
	}
	switch {
	case in.DNS != nil:
		c.DNS = *in.DNS
	case c.Provider == ProviderAzure:
		c.DNS = types.DNS{Nameservers: []string{AzureDNS}}
	case c.Provider == ProviderAWS:
		c.DNS = types.DNS{Nameservers: []string{AWSDNS}}
	}
	for i, ns := range c.DNS.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			return nil, cniplug.ConfError(fmt.Sprintf("ipam.dns.nameservers[%d]", i), "%q is not an IP address", ns)
		}
	}
	if len(in.Routes) > 0 && string(in.Routes) != "null" {
		c.Routes = []*types.Route{}
		if err := json.Unmarshal(in.Routes, &c.Routes); err != nil {
			if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
				return nil, cniplug.DecodeError("ipam.routes", in.Routes, &c.Routes, err)
			}
			return nil, cniplug.ConfError("ipam.routes", "%v: want a list like [{\"dst\": \"0.0.0.0/0\", \"gw\": \"10.240.0.1\"}] ([] for none)", err)
		}
		for i, r := range c.Routes {
			if r == nil || r.Dst.IP == nil {
				return nil, cniplug.ConfError(fmt.Sprintf("ipam.routes[%d].dst", i), "missing: every route needs a destination, e.g. 0.0.0.0/0")
			}
		}
	}
	return c, nil
}

// endpoint resolves and checks what the provider is asked.
func (c *config) endpoint(getenv func(string) string, field string) error {
	name := "config field \"ipam.endpoint\""
	c.Endpoint = strings.TrimSpace(field)
	if getenv != nil {
		if v := strings.TrimSpace(getenv(EnvEndpoint)); v != "" {
			c.Endpoint, name = v, "$"+EnvEndpoint
		}
	}
	switch c.Provider {
	case ProviderFile:
		c.Endpoint = strings.TrimPrefix(c.Endpoint, "file://")
		if c.Endpoint == "" {
			return cniplug.ConfError("ipam.endpoint", "missing: the file provider reads its pools from the file named here, e.g. \"/etc/cnibox/pools.json\"")
		}
		return nil
	case ProviderAzure:
		if c.Endpoint == "" {
			c.Endpoint = AzureEndpoint
		}
	case ProviderAWS:
		if c.Endpoint == "" {
			c.Endpoint = AWSEndpoint
		}
		c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: %q is not an http:// URL: the %s provider is asked over plain HTTP, e.g. %q", name, c.Endpoint, c.Provider, map[string]string{ProviderAzure: AzureEndpoint, ProviderAWS: AWSEndpoint}[c.Provider])
	}
	return nil
}

// parseDuration reads a duration written as a Go duration ("10s", "500ms")
// or a number of seconds (10, "10"); absent means def.
func parseDuration(field string, raw json.RawMessage, def time.Duration, zeroOK bool) (time.Duration, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, cniplug.ConfError(field, "%s is not a duration", raw)
		}
		s = strings.TrimSpace(s)
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if !(secs >= 0 && secs <= 86400) { // also NaN
			return 0, cniplug.ConfError(field, "%s is out of range: use a duration between 0s and 24h", s)
		}
		d = time.Duration(secs * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, cniplug.ConfError(field, "%q is not a duration: write it like \"10s\" or \"500ms\", or a number of seconds", s)
	}
	if d < 0 || (d == 0 && !zeroOK) || d > 24*time.Hour {
		return 0, cniplug.ConfError(field, "%s is out of range: use a duration between %s and 24h", d, map[bool]string{true: "0s", false: "1ms"}[zeroOK])
	}
	return d, nil
}
