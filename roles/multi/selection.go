package multi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/cniargs"
)

// checkExtras validates the selection fields beyond name, interface, ips
// and mac: portMappings, bandwidth, infiniband-guid, deviceID, cni-args and
// default-route. The error says which field and what is wrong.
func (s *networkSelection) checkExtras() error {
	for j, pm := range s.PortMappings {
		if pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
			return fmt.Errorf("portMappings[%d]: hostPort %d and containerPort %d must be ports (1-65535)", j, pm.HostPort, pm.ContainerPort)
		}
		if p := strings.ToLower(pm.Protocol); p != "" && p != "tcp" && p != "udp" && p != "sctp" {
			return fmt.Errorf("portMappings[%d]: protocol %q: want tcp, udp or sctp", j, pm.Protocol)
		}
		if pm.HostIP != "" {
			if _, err := netip.ParseAddr(pm.HostIP); err != nil {
				return fmt.Errorf("portMappings[%d]: hostIP %q is not an IP address", j, pm.HostIP)
			}
		}
	}
	if b := s.Bandwidth; b != nil && (b.IngressRate < 0 || b.IngressBurst < 0 || b.EgressRate < 0 || b.EgressBurst < 0) {
		return fmt.Errorf("bandwidth: rates and bursts must not be negative")
	}
	if s.InfinibandGUID != "" {
		if _, err := net.ParseMAC(s.InfinibandGUID); err != nil {
			return fmt.Errorf("infiniband-guid %q is not a GUID (e.g. c2:11:22:33:44:55:66:77)", s.InfinibandGUID)
		}
	}
	if s.DeviceID != "" && (strings.ContainsAny(s.DeviceID, "/\x00") || s.DeviceID == "." || s.DeviceID == "..") {
		return fmt.Errorf("deviceID %q is not a device (a PCI address such as 0000:00:05.0, or a device name)", s.DeviceID)
	}
	if _, err := s.gateways(); err != nil {
		return err
	}
	return nil
}

// gateways returns default-route as addresses.
func (s *networkSelection) gateways() ([]netip.Addr, error) {
	if s.DefaultRoute == nil {
		return nil, nil
	}
	out := []netip.Addr{}
	for _, g := range *s.DefaultRoute {
		a, err := netip.ParseAddr(g)
		if err != nil {
			return nil, fmt.Errorf("default-route: %q is not a gateway address (e.g. 10.1.1.1)", g)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// runtimeConfig returns what the selection asks of the network's plugins,
// by capability name (the keys of a plugin's "capabilities").
func (s *networkSelection) runtimeConfig() map[string]any {
	rc := map[string]any{}
	if len(s.IPs) > 0 {
		rc["ips"] = s.IPs
	}
	if s.MAC != "" {
		rc["mac"] = s.MAC
	}
	if len(s.PortMappings) > 0 {
		rc["portMappings"] = s.PortMappings
	}
	if s.Bandwidth != nil {
		rc["bandwidth"] = s.Bandwidth
	}
	if s.InfinibandGUID != "" {
		rc["infinibandGUID"] = s.InfinibandGUID
	}
	if s.DeviceID != "" {
		rc["deviceID"] = s.DeviceID
	}
	return rc
}

// injectPluginFields sets set's entries at the top level of every plugin
// of the conflist body (a conflist's JSON), as Multus injects deviceID
// and pciBusID.
func injectPluginFields(body []byte, set map[string]any) ([]byte, error) {
	if len(set) == 0 {
		return body, nil
	}
	out, err := cniargs.EachPlugin(body, func(j int, p map[string]any) error {
		if p == nil {
			return cniplug.Errorf(types.ErrInvalidNetworkConfig, "plugins[%d] is not an object", j)
		}
		maps.Copy(p, set)
		return nil
	})
	var de *cniargs.DecodeError
	if errors.As(err, &de) {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "%v", err)
	}
	return out, err
}

// mergeCNIArgs merges a selection's cni-args into every plugin's
// "args": {"cni": {...}}, as Multus does, except that ips, mac and
// portMappings reach only the plugins that declare that capability
// (internal/cniargs): a pod asks for an address, a MAC or a host port only
// of a network that offers it, through cni-args as through the selection's
// own fields; on a network that does not, the ADD is refused (error 7)
// naming the key, never run without it.
func mergeCNIArgs(ref *netRef, cniArgs map[string]any) ([]byte, error) {
	body := asList(ref.body)
	if !json.Valid(body) {
		return nil, cniplug.Errorf(types.ErrDecodingFailure, "%s is not JSON: cni-args cannot be added to it", ref.source)
	}
	out, err := cniargs.Merge(body, cniArgs)
	var ne *cniargs.NotEntitledError
	switch {
	case errors.As(err, &ne):
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: %w", ref.source, err)
	case err != nil:
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s: cni-args: %w", ref.source, err)
	}
	return out, nil
}
