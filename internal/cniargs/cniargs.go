// Package cniargs merges the cni-args of a pod's network selection into a
// network's config, as Multus does (into every plugin's "args": {"cni":
// {...}}), with one difference: what a capability gives (an address, a MAC,
// port mappings) reaches only the plugins that declare that capability, as
// the runtime's own capability arguments do. Without the gate a pod's
// cni-args "ips" or "mac" reach args.cni.ips and args.cni.mac, which the
// roles honour as the config's own (the CNI conventions give them the
// meaning of the ips and mac capabilities), on any network it may select.
// The multi role merges with it, and cnibox-agent's pod API checks the
// merge of a NetworkAttachmentDefinition of an untrusted namespace against
// its allowlist with it, so the two agree byte for byte.
package cniargs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Gated are the capabilities whose value a pod's cni-args may carry only
// to a plugin that declares them.
var Gated = []string{"ips", "mac", "portMappings"}

// NotEntitledError is a cni-args key that asks for what a capability
// gives, on a network none of whose plugins declares that capability.
type NotEntitledError struct {
	Key, Capability, Network string
}

func (e *NotEntitledError) Error() string {
	return fmt.Sprintf("cni-args %q asks for what the %s capability gives, but no plugin of network %q declares it (\"capabilities\": {%q: true}): "+
		"remove %q from the pod's cni-args, or have the network's owner declare the capability on the plugin that takes it",
		e.Key, e.Capability, e.Network, e.Capability, e.Key)
}

// capabilityOf returns the gated capability whose args.cni field a key of
// cni-args lands on in the roles' decoder (encoding/json, which matches
// keys case-insensitively: "IPs" is ips), or "".
func capabilityOf(key string) string {
	var probe struct {
		IPs          json.RawMessage `json:"ips"`
		MAC          json.RawMessage `json:"mac"`
		PortMappings json.RawMessage `json:"portMappings"`
	}
	b, _ := json.Marshal(map[string]int{key: 1})
	_ = json.Unmarshal(b, &probe)
	switch {
	case probe.IPs != nil:
		return "ips"
	case probe.MAC != nil:
		return "mac"
	case probe.PortMappings != nil:
		return "portMappings"
	}
	return ""
}

// declares returns the capabilities the plugin declares, read from the
// plugin's bytes as libcni reads them.
func declares(plugin map[string]any) map[string]bool {
	var c struct {
		Capabilities map[string]bool `json:"capabilities"`
	}
	b, _ := json.Marshal(plugin)
	_ = json.Unmarshal(b, &c) // a capabilities libcni cannot read declares nothing
	return c.Capabilities
}

// AsList returns a config body as a conflist: a single plugin's config
// wrapped (name, cniVersion and ifname lifted), as libcni does; a conflist,
// or what is not a JSON object, as it is.
func AsList(body []byte) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil || obj == nil {
		return body
	}
	if _, ok := obj["plugins"]; ok {
		return body
	}
	list := map[string]json.RawMessage{"plugins": json.RawMessage("[" + string(body) + "]")}
	for _, k := range []string{"name", "cniVersion", "ifname"} {
		if v, ok := obj[k]; ok {
			list[k] = v
		}
	}
	b, _ := json.Marshal(list)
	return b
}

// Merge returns the conflist body (see AsList) with cniArgs merged into
// each plugin's args.cni (a key of cniArgs replaces the config's), except
// that a key Gated names goes only to the plugins that declare its
// capability, and is a *NotEntitledError when none does. An error that is
// not a *NotEntitledError is a body that cannot take cni-args: not JSON
// (a *DecodeError), or a plugin that is not an object or whose "args" is
// not one.
func Merge(body []byte, cniArgs map[string]any) ([]byte, error) {
	if len(cniArgs) == 0 {
		return body, nil
	}
	given := map[string]bool{}
	out, err := EachPlugin(body, func(j int, p map[string]any) error {
		if p == nil {
			return fmt.Errorf("plugins[%d] is not an object: cni-args cannot be added to it", j)
		}
		args, _ := p["args"].(map[string]any)
		if args == nil {
			if _, present := p["args"]; present {
				return fmt.Errorf("plugins[%d].args is not an object: cni-args cannot be added to it", j)
			}
			args = map[string]any{}
		}
		cni, _ := args["cni"].(map[string]any)
		if cni == nil {
			cni = map[string]any{}
		}
		caps := declares(p)
		for k, v := range cniArgs {
			if c := capabilityOf(k); c != "" {
				if !caps[c] {
					continue
				}
				given[k] = true
			}
			cni[k] = v
		}
		args["cni"] = cni
		p["args"] = args
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := slices.Sorted(maps.Keys(cniArgs)) // the first refused, always the same
	for _, k := range keys {
		if c := capabilityOf(k); c != "" && !given[k] {
			var list map[string]json.RawMessage
			var name string
			_ = json.Unmarshal(body, &list)
			_ = json.Unmarshal(list["name"], &name)
			return nil, &NotEntitledError{Key: k, Capability: c, Network: name}
		}
	}
	return out, nil
}

// A DecodeError is a conflist body that EachPlugin cannot read: What says
// which part.
type DecodeError struct {
	What string
	Err  error
}

func (e *DecodeError) Error() string { return e.What + ": " + e.Err.Error() }

func (e *DecodeError) Unwrap() error { return e.Err }

// EachPlugin returns the conflist body with each of its plugins as edit
// leaves it: edit gets them in order, decoded (nil for one that is not a
// JSON object), and its error is EachPlugin's. A body that is not a
// conflist's JSON is a *DecodeError.
func EachPlugin(body []byte, edit func(j int, plugin map[string]any) error) ([]byte, error) {
	var list map[string]json.RawMessage
	var plugins []map[string]any
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &DecodeError{"the network config is not JSON", err}
	}
	if err := json.Unmarshal(list["plugins"], &plugins); err != nil {
		return nil, &DecodeError{"plugins", err}
	}
	for j, p := range plugins {
		if err := edit(j, p); err != nil {
			return nil, err
		}
	}
	list["plugins"], _ = json.Marshal(plugins)
	return json.Marshal(list)
}
