package dhcp

import (
	"strconv"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// config is the dhcp part of a plugin config, validated.
type config struct {
	Socket   string
	Request  []int
	Provide  []proto.Option
	Priority int
}

// ipamJSON is the "ipam" section as written (the reference's fields).
type ipamJSON struct {
	Type             string `json:"type"`
	DaemonSocketPath string `json:"daemonSocketPath"`
	Request          []struct {
		SkipDefault bool   `json:"skipDefault"`
		Option      string `json:"option"`
	} `json:"request"`
	Provide []struct {
		Option  string `json:"option"`
		Value   string `json:"value"`
		FromArg string `json:"fromArg"`
	} `json:"provide"`
	Priority int `json:"priority"`
}

// Option codes the role names.
const (
	optSubnetMask      = 1
	optRouter          = 3
	optDNS             = 6
	optHostname        = 12
	optDomainName      = 15
	optDomainSearch    = 119
	optClasslessRoutes = 121
)

// defaultRequest is what the daemon asks the server for unless a request
// entry says skipDefault.
var defaultRequest = []int{optSubnetMask, optRouter, optDNS, optDomainName, optDomainSearch, optClasslessRoutes}

// optionByName returns the code of an option name configs use (those of
// the reference, RFC 2132 names in lower case with dashes). A switch, not a
// map: a map literal would be built at every exec of cnibox.
func optionByName(s string) (int, bool) {
	switch s {
	case "subnet-mask":
		return optSubnetMask, true
	case "router":
		return optRouter, true
	case "dns", "domain-name-server", "domain-name-servers":
		return optDNS, true
	case "host-name", "hostname":
		return optHostname, true
	case "domain-name":
		return optDomainName, true
	case "static-routes":
		return 33, true
	case "ntp-servers":
		return 42, true
	case "vendor-class-identifier":
		return 60, true
	case "dhcp-client-identifier":
		return 61, true
	case "user-class":
		return 77, true
	case "domain-search":
		return optDomainSearch, true
	case "classless-static-routes", "classless-route":
		return optClasslessRoutes, true
	}
	return 0, false
}

// optionCode reads an option name or number.
func optionCode(field, s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if c, ok := optionByName(s); ok {
		return c, nil
	}
	c, err := strconv.Atoi(s)
	if err != nil || c < 1 || c > 254 {
		return 0, cniplug.ConfError(field, "%q is no DHCP option: give its number (1-254) or a name such as \"router\", \"classless-static-routes\" or \"host-name\"", s)
	}
	return c, nil
}

// loadConfig reads the "ipam" section; the hostname (option 12) comes from
// CNI_ARGS K8S_POD_NAME unless "provide" sets it.
func loadConfig(a *cniplug.Args) (*config, error) {
	in, err := ipamrole.Section[ipamJSON](a, "dhcp reads its daemon's socket and options")
	if err != nil {
		return nil, err
	}
	cfg := &config{Socket: in.DaemonSocketPath, Priority: in.Priority}
	if cfg.Socket == "" {
		cfg.Socket = proto.DefaultSocket
	} else if !strings.HasPrefix(cfg.Socket, "/") {
		return nil, cniplug.ConfError("ipam.daemonSocketPath", "%q is not an absolute path (the default is %s)", cfg.Socket, proto.DefaultSocket)
	}
	if in.Priority < 0 {
		return nil, cniplug.ConfError("ipam.priority", "%d is negative: give the routes' metric, 0 or more", in.Priority)
	}
	skip := false
	seen := map[int]bool{}
	for i, r := range in.Request {
		skip = skip || r.SkipDefault
		if r.Option == "" {
			continue
		}
		c, err := optionCode("ipam.request["+strconv.Itoa(i)+"].option", r.Option)
		if err != nil {
			return nil, err
		}
		if !seen[c] {
			seen[c] = true
			cfg.Request = append(cfg.Request, c)
		}
	}
	if !skip {
		for _, c := range defaultRequest {
			if !seen[c] {
				seen[c] = true
				cfg.Request = append(cfg.Request, c)
			}
		}
	}
	hostname := false
	for i, p := range in.Provide {
		f := "ipam.provide[" + strconv.Itoa(i) + "]"
		c, err := optionCode(f+".option", p.Option)
		if err != nil {
			return nil, err
		}
		v := p.Value
		if p.FromArg != "" {
			v = cniArg(a.RawArgs, p.FromArg)
			if v == "" {
				continue // the runtime did not pass it
			}
		}
		if v == "" {
			return nil, cniplug.ConfError(f+".value", "empty: give \"value\" or \"fromArg\" (a CNI_ARGS key such as K8S_POD_NAME)")
		}
		hostname = hostname || c == optHostname
		cfg.Provide = append(cfg.Provide, proto.Option{Code: c, Value: v})
	}
	if name := string(a.CNIArgs.K8S_POD_NAME); !hostname && name != "" {
		cfg.Provide = append(cfg.Provide, proto.Option{Code: optHostname, Value: name})
	}
	return cfg, nil
}

// cniArg returns the value of key in CNI_ARGS ("K=V;K2=V2"), or "".
func cniArg(raw, key string) string {
	for _, kv := range strings.Split(raw, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
