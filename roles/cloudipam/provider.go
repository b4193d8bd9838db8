package cloudipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// nicInfo is one subnet of one NIC as a provider lists it.
type nicInfo struct {
	MAC       string // normalized: lower case hex, no separators; "" = any node (file pools)
	Device    int
	Subnet    netip.Prefix
	Primary   []netip.Addr
	Secondary []netip.Addr
}

// provider asks a cloud what addresses the node's NICs have.
type provider interface {
	// describe names the provider and its endpoint in messages, e.g.
	// "the Azure host agent at http://...".
	describe() string
	// query returns the provider's answer. want reports whether a NIC (by
	// normalized MAC) is of interest, so providers that ask per NIC can
	// skip the others. Errors are unreachableError (the cache may serve)
	// or coded errors (6: the answer is malformed).
	query(ctx context.Context, want func(mac string) bool) ([]nicInfo, error)
}

// newProvider returns the provider of c.
func newProvider(c *config) provider {
	switch c.Provider {
	case ProviderAWS:
		return &awsProvider{c: c}
	case ProviderFile:
		return &fileProvider{c: c}
	default:
		return &azureProvider{c: c}
	}
}

// unreachableError: the provider could not be asked or did not answer
// usefully (connection refused, timeout, HTTP error status). Allocation
// continues from the cache if there is one.
type unreachableError struct {
	what string // the provider, as describe() says
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot get an answer from %s: %v", e.what, e.err)
}
func (e *unreachableError) Unwrap() error { return e.err }

// isUnreachable reports whether err means the provider could not be asked.
func isUnreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}

// malformed returns the error (code 6) for an answer that cannot be used.
func malformed(what string, format string, args ...any) error {
	return cniplug.Errorf(types.ErrDecodingFailure, "%s gave an answer cnibox cannot use: %s", what, fmt.Sprintf(format, args...))
}

// fetch runs one HTTP request for a provider: transport failures and error
// statuses are unreachableError, a body past MaxAnswer is malformed.
func fetch(ctx context.Context, c *config, what string, req httpRequest) ([]byte, error) {
	req.ConnectTimeout, req.ResponseTimeout, req.MaxBody = c.ConnectTimeout, c.ResponseTimeout, MaxAnswer
	resp, err := doHTTP(ctx, req)
	switch {
	case errors.Is(err, errTooLarge):
		return nil, malformed(what, "%s: %v: cnibox reads at most %d bytes (1 MiB) of it", req.URL, err, MaxAnswer)
	case err != nil:
		return nil, &unreachableError{what: what, err: fmt.Errorf("%s %s: %w", req.Method, req.URL, err)}
	case resp.Status != 200:
		body := ""
		if b := strings.TrimSpace(string(resp.Body)); b != "" {
			body = ": " + clip(b)
		}
		return nil, &unreachableError{what: what, err: fmt.Errorf("%s %s: HTTP status %d%s", req.Method, req.URL, resp.Status, body)}
	}
	return resp.Body, nil
}

// normMAC normalizes a MAC as providers write it ("000D3A51C490",
// "0e:1f:..", "00-0D-..") to 12 lower-case hex digits.
func normMAC(s string) (string, bool) {
	s = strings.ToLower(strings.NewReplacer(":", "", "-", "", ".", "").Replace(strings.TrimSpace(s)))
	if len(s) != 12 {
		return "", false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return s, true
}

// macString writes a normalized MAC with colons: 00:0d:3a:51:c4:90.
func macString(mac string) string {
	if len(mac) != 12 {
		return mac
	}
	var parts []string
	for i := 0; i < 12; i += 2 {
		parts = append(parts, mac[i:i+2])
	}
	return strings.Join(parts, ":")
}

// tidy checks and merges what a provider listed: MACs are well formed, the
// same NIC and subnet listed twice count once, addresses lie in their
// subnet, an address both primary and secondary is primary, and one address
// listed for two NICs or subnets makes the answer malformed (the cloud would
// route it to one of them only).
func tidy(what string, in []nicInfo) ([]nicInfo, error) {
	type key struct {
		mac    string
		subnet netip.Prefix
	}
	idx := map[key]int{}
	var out []nicInfo
	owner := map[netip.Addr]key{}
	for _, n := range in {
		if !n.Subnet.IsValid() || n.Subnet.Masked() != n.Subnet || n.Subnet.Addr().Is4In6() || n.Subnet.Addr().Zone() != "" {
			return nil, malformed(what, "NIC %s: subnet %v is not a subnet in CIDR notation", macString(n.MAC), n.Subnet)
		}
		k := key{n.MAC, n.Subnet}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nicInfo{MAC: n.MAC, Device: n.Device, Subnet: n.Subnet})
		}
		for _, list := range [][]netip.Addr{n.Primary, n.Secondary} {
			for _, a := range list {
				if !n.Subnet.Contains(a) {
					return nil, malformed(what, "NIC %s: address %s is outside its subnet %s", macString(n.MAC), a, n.Subnet)
				}
				if o, seen := owner[a]; seen && o != k {
					return nil, malformed(what, "address %s is listed for NIC %s in %s and for NIC %s in %s", a, macString(o.mac), o.subnet, macString(k.mac), k.subnet)
				}
				owner[a] = k
			}
		}
		out[i].Primary = append(out[i].Primary, n.Primary...)
		out[i].Secondary = append(out[i].Secondary, n.Secondary...)
	}
	for i := range out {
		n := &out[i]
		slices.SortFunc(n.Primary, netip.Addr.Compare)
		n.Primary = slices.Compact(n.Primary)
		slices.SortFunc(n.Secondary, netip.Addr.Compare)
		n.Secondary = slices.Compact(n.Secondary)
		n.Secondary = slices.DeleteFunc(n.Secondary, func(a netip.Addr) bool {
			_, primary := slices.BinarySearchFunc(n.Primary, a, netip.Addr.Compare)
			return primary
		})
	}
	return out, nil
}
