package cloudipam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cnibox/cnibox/internal/conffile"
)

// fileProvider reads pools from a JSON file, for bare metal and tests:
//
//	{"interfaces": [
//	  {"mac": "00:0d:3a:51:c4:90", "subnet": "10.240.0.0/16",
//	   "primary": ["10.240.0.35"],
//	   "addresses": ["10.240.0.36", "10.240.0.40-10.240.0.49"]}
//	]}
//
// "mac" is optional: a pool without one belongs to the node whatever its NICs.
type fileProvider struct{ c *config }

// maxFileAddrs bounds the addresses of a pool file, counting every address
// of its "a-b" ranges.
const maxFileAddrs = 1 << 18

type poolFile struct {
	Interfaces []struct {
		MAC       string   `json:"mac"`
		Device    int      `json:"device"`
		Subnet    string   `json:"subnet"`
		Primary   []string `json:"primary"`
		Addresses []string `json:"addresses"`
	} `json:"interfaces"`
}

func (p *fileProvider) describe() string { return "the pool file " + p.c.Endpoint }

func (p *fileProvider) query(_ context.Context, _ func(string) bool) ([]nicInfo, error) {
	what := p.describe()
	body, err := conffile.Read(p.c.Endpoint, MaxAnswer)
	if errors.Is(err, conffile.ErrTooLarge) {
		return nil, malformed(what, "it is larger than %d bytes (1 MiB), the most cnibox reads", MaxAnswer)
	}
	if err != nil {
		return nil, &unreachableError{what: what, err: err}
	}
	nics, err := parsePoolFile(body)
	if err != nil {
		return nil, malformed(what, "%v", err)
	}
	return tidy(what, nics)
}

// parsePoolFile reads the JSON of a pool file. Unknown fields are refused,
// so a misspelt one does not silently leave a pool empty. Its messages name
// the field, never a value: endpoint may name any file on the node.
func parsePoolFile(body []byte) ([]nicInfo, error) {
	var pf poolFile
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&pf); err != nil {
		return nil, fmt.Errorf("not a pool file (want {\"interfaces\": [{\"mac\", \"subnet\", \"primary\", \"addresses\"}]}): %s", conffile.JSONError(err))
	}
	if d.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	var out []nicInfo
	budget := maxFileAddrs
	for i, in := range pf.Interfaces {
		field := fmt.Sprintf("interfaces[%d]", i)
		n := nicInfo{Device: in.Device}
		if in.MAC != "" {
			mac, ok := normMAC(in.MAC)
			if !ok {
				return nil, fmt.Errorf("%s.mac is not a MAC address", field)
			}
			n.MAC = mac
		}
		s, err := netip.ParsePrefix(strings.TrimSpace(in.Subnet))
		if err != nil || s.Masked() != s {
			return nil, fmt.Errorf("%s.subnet is not a subnet in CIDR notation", field)
		}
		n.Subnet = s
		if n.Primary, err = fileAddrs(field+".primary", in.Primary, &budget); err != nil {
			return nil, err
		}
		if n.Secondary, err = fileAddrs(field+".addresses", in.Addresses, &budget); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// fileAddrs reads addresses and "first-last" ranges, taking each from budget.
func fileAddrs(field string, in []string, budget *int) ([]netip.Addr, error) {
	var out []netip.Addr
	for i, s := range in {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
		first, err := netip.ParseAddr(strings.TrimSpace(lo))
		if err != nil || first.Zone() != "" {
			return nil, fmt.Errorf("%s[%d] is not an address or a range like 10.0.0.10-10.0.0.20", field, i)
		}
		first = first.Unmap()
		last := first
		if isRange {
			if last, err = netip.ParseAddr(strings.TrimSpace(hi)); err != nil || last.Unmap().BitLen() != first.BitLen() || last.Unmap().Less(first) {
				return nil, fmt.Errorf("%s[%d] is not a range like 10.0.0.10-10.0.0.20", field, i)
			}
			last = last.Unmap()
		}
		for a := first; ; a = a.Next() {
			if *budget--; *budget < 0 {
				return nil, fmt.Errorf("%s[%d]: the file lists more than %d addresses", field, i, maxFileAddrs)
			}
			out = append(out, a)
			if a == last {
				break
			}
		}
	}
	return out, nil
}
