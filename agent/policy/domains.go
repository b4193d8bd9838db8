package policy

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// domainNamePattern is network-policy-api v0.3.0's validation of a
// DomainName: labels of letters, digits, hyphens and underscores, at least
// two of them, optionally "*." first and a dot last.
var domainNamePattern = regexp.MustCompile(`^(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.?$`)

// domainName is n as the engine keeps it (lowercased, without a final
// dot), or false when the API's validation would refuse it.
func domainName(n string) (string, bool) {
	if !domainNamePattern.MatchString(n) {
		return "", false
	}
	return strings.TrimSuffix(strings.ToLower(n), "."), true
}

// domainsOf is the domainNames peers of the active policies, in a stable
// order (the model's Rules.Domains).
func domainsOf(policies map[string]*compiled, active map[string]bool) []policymodel.Domains {
	var out []policymodel.Domains
	for id, c := range policies {
		if active[id] {
			out = append(out, c.domains...)
		}
	}
	slices.SortFunc(out, func(a, b policymodel.Domains) int {
		return cmp.Or(cmp.Compare(a.Subject, b.Subject), cmp.Compare(a.Set, b.Set))
	})
	// One entry per subject and set: two rules with the same names.
	return slices.CompactFunc(out, func(a, b policymodel.Domains) bool { return a.Subject == b.Subject && a.Set == b.Set })
}
