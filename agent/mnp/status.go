package mnp

import (
	"fmt"
	"strings"

	"github.com/cnibox/cnibox/agent/cluster"
)

// PolicyForAnnotation names the networks a MultiNetworkPolicy is for:
// "<namespace>/<name>" of NetworkAttachmentDefinitions, or "<name>" for
// one of the policy's namespace, comma separated.
const PolicyForAnnotation = "k8s.v1.cni.cncf.io/policy-for"

// Attachment is one secondary interface of a pod (the cluster cache
// reads them from its network-status annotation).
type Attachment = cluster.Attachment

// ParseNetworkStatus returns the secondary attachments of a
// network-status annotation (cluster.ParseNetworkStatus).
func ParseNetworkStatus(value string) ([]Attachment, error) { return cluster.ParseNetworkStatus(value) }

// PolicyFor returns the networks of a policy-for annotation value, each
// "<namespace>/<name>" (a bare name is in namespace ns). An empty value,
// or an empty or malformed item, is an error naming it: such a policy is
// for no network.
func PolicyFor(ns, value string) ([]string, error) {
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("annotation %s is missing or empty: name the networks, as <namespace>/<name> of their NetworkAttachmentDefinitions, comma separated", PolicyForAnnotation)
	}
	var out []string
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		n, name, ok := strings.Cut(item, "/")
		if !ok {
			n, name = ns, item
		}
		if n == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("annotation %s: %q is not <namespace>/<name> or <name> of a NetworkAttachmentDefinition", PolicyForAnnotation, item)
		}
		out = append(out, n+"/"+name)
	}
	return out, nil
}
