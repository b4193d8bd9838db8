// Package fqdn is the DNS half of ClusterNetworkPolicy's `domainNames`
// egress peer: it sees the answers the pods it is handed get, and tells
// the policy engine which addresses each pod resolved for which names,
// before the pod has the answer.
//
// Three parts: the names (Pattern: network-policy-api's DomainName, exact
// or `*.` wildcard), the messages (the query's one question, the answer's
// chain of CNAMEs to its A and AAAA records, bounded against a server that
// lies), and the Proxy: netops/nft's DNS table sends the pods' DNS (UDP
// and TCP port 53, to any server) to its port after kube-proxy's DNAT,
// its destination kept, and netops.MarkLocal's routing delivers it to the
// node; the proxy's transparent sockets read where each query was going
// (the server, or the endpoint of a ClusterIP: UDP's IP_ORIGDSTADDR, a TCP
// connection's own address), ask Permit whether the pod may reach that
// server at all, forward the query there as the node, call Learn with the
// names and addresses of the answer and answer the pod from the server's
// address. docs/policy.md, "domainNames (the DNS half)".
package fqdn

import (
	"fmt"
	"strings"
)

// Pattern is one DomainName of a ClusterNetworkPolicy egress peer
// (sigs.k8s.io/network-policy-api v0.3.0, apis/v1beta1): an exact name, or
// `*.` followed by a name, which matches one or more whole labels in front
// of it (`*.kubernetes.io` matches `www.kubernetes.io` and
// `latest.blog.kubernetes.io`, not `kubernetes.io`). Names compare without
// regard to case, and a trailing dot is ignored.
type Pattern struct {
	wildcard bool
	name     string // canonical: lower case, no trailing dot
}

// maxName is the longest name DNS carries, in its text form without the
// trailing dot (RFC 1035: 255 octets on the wire).
const maxName = 253

// ParsePattern parses a DomainName as the API's validation pattern
// accepts it: an optional `*.`, then two or more labels separated by dots
// (letters, digits, `-` and `_`, beginning and ending with a letter or a
// digit), then an optional trailing dot; beside the pattern, the limits of
// DNS itself (63 octets a label, 253 a name).
func ParsePattern(s string) (Pattern, error) {
	var p Pattern
	rest := s
	if strings.HasPrefix(rest, "*.") {
		p.wildcard = true
		rest = rest[2:]
	}
	rest = strings.TrimSuffix(rest, ".")
	if len(rest) > maxName {
		return Pattern{}, fmt.Errorf("domain name %q: longer than %d characters", s, maxName)
	}
	labels := strings.Split(rest, ".")
	if len(labels) < 2 {
		return Pattern{}, fmt.Errorf("domain name %q: needs at least two labels (as in example.com)", s)
	}
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return Pattern{}, fmt.Errorf("domain name %q: %w", s, err)
		}
	}
	p.name = strings.ToLower(rest)
	return p, nil
}

// checkLabel reports what is wrong with one label of a DomainName, if
// anything.
func checkLabel(l string) error {
	switch {
	case l == "":
		return fmt.Errorf("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %q longer than 63 characters", l)
	case !alnum(l[0]) || !alnum(l[len(l)-1]):
		return fmt.Errorf("label %q must begin and end with a letter or digit", l)
	}
	for i := 1; i < len(l)-1; i++ {
		if c := l[i]; !alnum(c) && c != '-' && c != '_' {
			return fmt.Errorf("label %q: character %q is not a letter, digit, '-' or '_'", l, c)
		}
	}
	return nil
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// MustParsePattern is ParsePattern for tests and constants: it panics on
// an error.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Matches reports whether name (as DNS carries it: any case, with or
// without the trailing dot) is one the pattern names.
func (p Pattern) Matches(name string) bool {
	n := strings.TrimSuffix(name, ".")
	if !p.wildcard {
		return strings.EqualFold(n, p.name)
	}
	// One or more whole labels, then ".<name>".
	if len(n) < len(p.name)+2 {
		return false
	}
	cut := len(n) - len(p.name)
	labels := n[:cut-1] // the labels the '*' stands for: none of them empty
	return n[cut-1] == '.' && strings.EqualFold(n[cut:], p.name) &&
		!strings.HasPrefix(labels, ".") && !strings.HasSuffix(labels, ".") && !strings.Contains(labels, "..")
}

// String returns the pattern in its canonical form: lower case, without a
// trailing dot.
func (p Pattern) String() string {
	if p.wildcard {
		return "*." + p.name
	}
	return p.name
}

// MatchAny reports whether one of names matches one of patterns: an
// address the proxy learned is the peer of a rule when any name on its
// chain (the query name or a CNAME on the way to it) is one the rule
// names.
func MatchAny(patterns []Pattern, names []string) bool {
	for _, n := range names {
		for _, p := range patterns {
			if p.Matches(n) {
				return true
			}
		}
	}
	return false
}

// Canonical returns name as Learn hands names out: lower case, without
// the trailing dot.
func Canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
