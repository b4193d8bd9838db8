package multi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// networkSelection is one network a pod asks for in its
// k8s.v1.cni.cncf.io/networks annotation (the Network Plumbing Working
// Group's NetworkSelectionElement; the fields cnibox uses).
type networkSelection struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace,omitempty"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	// InterfaceRequest is the name "interface" had before Multus 3.2;
	// Multus 4 still reads it.
	InterfaceRequest string `json:"interfaceRequest,omitempty"`
	// PortMappings and Bandwidth reach the network's plugins that declare
	// the portMappings / bandwidth capability.
	PortMappings []portMapping `json:"portMappings,omitempty"`
	Bandwidth    *bandwidth    `json:"bandwidth,omitempty"`
	// InfinibandGUID reaches the plugins with the infinibandGUID
	// capability.
	InfinibandGUID string `json:"infiniband-guid,omitempty"`
	// DeviceID reaches the plugins with the deviceID capability (a device
	// of the NAD's resourceName takes precedence, as in Multus).
	DeviceID string `json:"deviceID,omitempty"`
	// CNIArgs are merged into every plugin's "args": {"cni": {...}}.
	CNIArgs map[string]any `json:"cni-args,omitempty"`
	// DefaultRoute makes this network's interface the pod's default route
	// through these gateways (nil: not asked; empty: keep the network's
	// own default route and drop the others').
	DefaultRoute *[]string `json:"default-route,omitempty"`
}

// portMapping is one entry of "portMappings" (the portMappings capability).
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// bandwidth is "bandwidth" (the bandwidth capability): bits per second and
// bits.
type bandwidth struct {
	IngressRate  int `json:"ingressRate"`
	IngressBurst int `json:"ingressBurst"`
	EgressRate   int `json:"egressRate"`
	EgressBurst  int `json:"egressBurst"`
}

// qualified returns "namespace/name".
func (s networkSelection) qualified() string { return s.Namespace + "/" + s.Name }

// dns1123 matches a Kubernetes object name (a DNS-1123 subdomain) or
// namespace. It is compiled on first use: every CNI call is a fresh process,
// and a package-level MustCompile (or sync.OnceValue) would cost every
// role's start-up.
func dns1123() *regexp.Regexp {
	dns1123Re.once.Do(func() {
		dns1123Re.re = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	})
	return dns1123Re.re
}

var dns1123Re struct {
	once sync.Once
	re   *regexp.Regexp
}

// parseNetworksAnnotation parses the value of the networks annotation of
// pod (namespace/name, for messages) in either of its two forms: a comma
// list of "[namespace/]name[@interface]", or a JSON list of objects
// with every field of the specification (networkSelection). A network
// without a namespace is in defaultNamespace (the pod's). Errors are code 7
// and name the annotation.
func parseNetworksAnnotation(defaultNamespace, pod, value string) ([]networkSelection, error) {
	return parseSelections(agentapi.NetworksAnnotation, defaultNamespace, pod, value)
}

// parseSelections parses a selection annotation (the networks annotation,
// or Multus' default-network annotation, which has the same syntax).
func parseSelections(annotation, podNamespace, pod, value string) ([]networkSelection, error) {
	bad := func(format string, args ...any) error {
		return cniplug.Errorf(types.ErrInvalidNetworkConfig, "pod %s annotation %s: %s", pod, annotation, fmt.Sprintf(format, args...))
	}
	value = strings.TrimSpace(value)
	var out []networkSelection
	if strings.HasPrefix(value, "[") {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(value), &raw); err != nil {
			return nil, bad("not a JSON list of networks (%v): want [{\"name\": \"net\", \"namespace\": \"ns\", \"interface\": \"net1\"}] or \"ns/net@net1, net2\"", err)
		}
		for i, r := range raw {
			var s networkSelection
			if !bytes.HasPrefix(bytes.TrimSpace(r), []byte("{")) {
				return nil, bad("item %d is %s, not an object", i, abbrev(r))
			}
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, bad("item %d %s: %v", i, abbrev(r), err)
			}
			if s.Name == "" {
				return nil, bad("item %d %s has no \"name\"", i, abbrev(r))
			}
			if s.Interface == "" {
				s.Interface = s.InterfaceRequest
			}
			s.InterfaceRequest = ""
			out = append(out, s)
		}
	} else if value != "" {
		for i, item := range strings.Split(value, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			var s networkSelection
			rest := item
			if ns, n, ok := strings.Cut(rest, "/"); ok {
				s.Namespace, rest = ns, n
			}
			if n, ifname, ok := strings.Cut(rest, "@"); ok {
				rest, s.Interface = n, ifname
			}
			s.Name = rest
			if strings.ContainsAny(s.Name, "/@") || strings.Contains(s.Interface, "@") {
				return nil, bad("item %d %q: want [namespace/]name[@interface]", i, item)
			}
			if s.Name == "" || (s.Namespace == "" && strings.Contains(item, "/")) || (s.Interface == "" && strings.Contains(item, "@")) {
				return nil, bad("item %d %q has an empty part: want [namespace/]name[@interface]", i, item)
			}
			out = append(out, s)
		}
	}
	seen := map[string]int{}
	for i := range out {
		s := &out[i]
		if s.Namespace == "" {
			s.Namespace = podNamespace
		}
		if !dns1123().MatchString(s.Name) || len(s.Name) > 253 {
			return nil, bad("network %d name %q is not a Kubernetes object name (lower case letters, digits, '-', '.')", i, s.Name)
		}
		if !dns1123().MatchString(s.Namespace) || len(s.Namespace) > 63 {
			return nil, bad("network %d namespace %q is not a Kubernetes namespace name", i, s.Namespace)
		}
		if s.Interface != "" {
			if err := utils.ValidateInterfaceName(s.Interface); err != nil {
				return nil, bad("network %d (%s) interface %q: %s", i, s.qualified(), s.Interface, err.Msg)
			}
			if j, dup := seen[s.Interface]; dup {
				return nil, bad("networks %d and %d both ask for interface %q", j, i, s.Interface)
			}
			seen[s.Interface] = i
		}
		for _, ip := range s.IPs {
			if _, err := netip.ParsePrefix(ip); err != nil {
				return nil, bad("network %d (%s) ips: %q is not an address with prefix length (e.g. 10.1.1.11/24)", i, s.qualified(), ip)
			}
		}
		if s.MAC != "" {
			if _, err := net.ParseMAC(s.MAC); err != nil {
				return nil, bad("network %d (%s) mac %q is not a MAC address", i, s.qualified(), s.MAC)
			}
		}
		if err := s.checkExtras(); err != nil {
			return nil, bad("network %d (%s) %v", i, s.qualified(), err)
		}
	}
	return out, nil
}
