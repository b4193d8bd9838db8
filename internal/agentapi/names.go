package agentapi

import (
	"fmt"
	"strings"
)

// CheckNames returns an error of reason BadRequest unless namespace is a
// DNS-1123 label and name a DNS-1123 subdomain, as Kubernetes requires of a
// namespace and of a pod's or a NetworkAttachmentDefinition's name. A name
// that passes holds no '/' and no "..", so it cannot leave the API path it
// is put in. (Checked by hand, not with a regexp: compiling one at package
// init cost every cnibox exec about 0.6 ms.)
func CheckNames(namespace, name string) error {
	if len(namespace) > 63 || !isLabel(namespace) {
		return &Error{Reason: ReasonBadRequest, Msg: fmt.Sprintf("namespace %q is not a DNS-1123 label (lower case letters, digits and '-', at most 63)", namespace)}
	}
	if len(name) > 253 || !isSubdomain(name) {
		return &Error{Reason: ReasonBadRequest, Msg: fmt.Sprintf("name %q is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.', at most 253)", name)}
	}
	return nil
}

// isLabel reports whether s is lower case letters, digits and '-', not
// empty, starting and ending with a letter or digit.
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isSubdomain reports whether s is labels joined by '.'.
func isSubdomain(s string) bool {
	for _, l := range strings.Split(s, ".") {
		if !isLabel(l) {
			return false
		}
	}
	return true
}
