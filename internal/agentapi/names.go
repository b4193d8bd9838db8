package agentapi

import (
	"fmt"
	"regexp"
)

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// CheckNames returns an error of reason BadRequest unless namespace is a
// DNS-1123 label and name a DNS-1123 subdomain, as Kubernetes requires of a
// namespace and of a pod's or a NetworkAttachmentDefinition's name. A name
// that passes holds no '/' and no "..", so it cannot leave the API path it
// is put in.
func CheckNames(namespace, name string) error {
	if len(namespace) > 63 || !dns1123Label.MatchString(namespace) {
		return &Error{Reason: ReasonBadRequest, Msg: fmt.Sprintf("namespace %q is not a DNS-1123 label (lower case letters, digits and '-', at most 63)", namespace)}
	}
	if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
		return &Error{Reason: ReasonBadRequest, Msg: fmt.Sprintf("name %q is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.', at most 253)", name)}
	}
	return nil
}
