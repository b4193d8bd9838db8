package mnp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// PolicyForAnnotation names the networks a MultiNetworkPolicy is for:
// "<namespace>/<name>" of NetworkAttachmentDefinitions, or "<name>" for
// one of the policy's namespace, comma separated.
const PolicyForAnnotation = "k8s.v1.cni.cncf.io/policy-for"

// Attachment is one secondary interface of a pod, as its network-status
// annotation states it.
type Attachment struct {
	Network string // "<namespace>/<name>" of its NetworkAttachmentDefinition
	Iface   string // its name in the pod ("net1")
	IPs     []netip.Addr
}

// statusEntry is what mnp reads of an entry of the network-status
// annotation (Multus' format, which the multi role writes).
type statusEntry struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Default   bool     `json:"default"`
}

// ParseNetworkStatus returns the secondary attachments of a
// network-status annotation: the entries of a NetworkAttachmentDefinition
// ("<namespace>/<name>"), not the default network's. Addresses that do
// not parse are left out; an annotation that is not a JSON list is an
// error.
func ParseNetworkStatus(value string) ([]Attachment, error) {
	if value == "" {
		return nil, nil
	}
	var entries []statusEntry
	if err := json.Unmarshal([]byte(value), &entries); err != nil {
		return nil, fmt.Errorf("network-status annotation: %w", err)
	}
	var out []Attachment
	for _, e := range entries {
		if e.Default || e.Interface == "" || !strings.Contains(e.Name, "/") {
			continue
		}
		a := Attachment{Network: e.Name, Iface: e.Interface}
		for _, s := range e.IPs {
			// Multus writes bare addresses; a prefix is read too.
			s, _, _ = strings.Cut(s, "/")
			if ip, err := netip.ParseAddr(s); err == nil {
				a.IPs = append(a.IPs, ip.Unmap())
			}
		}
		out = append(out, a)
	}
	return out, nil
}

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
