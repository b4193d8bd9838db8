package azurevnet

import (
	"encoding/json"
	"net/netip"
	"strings"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// known is what the role declares about itself for cnibox check, doctor,
// gc, store rebuild and inspect (see cniplug.Known).
var known = cniplug.Known{
	Config:        knownConfig,
	Parse:         parseOnly,
	HostVeth:      &hostVeth,
	DoctorHost:    doctorHost,
	DoctorGateway: doctorGateway,
	Describe:      describe,
}

// parseOnly is the parse of ADD, for cnibox check: the fields both modes
// read, then transparent mode's parser or bridge mode's (the bridge role's
// with azure-vnet's hooks).
func parseOnly(a *cniplug.Args) error {
	z, err := fields(a)
	if err != nil {
		return err
	}
	if z.Mode == ModeTransparent {
		_, err := parseTransparent(a, z)
		return err
	}
	_, err = bridgeMode.ParseConf(a)
	return err
}

// transparentKey files the networks of transparent mode, whose host veths
// are on no bridge.
const transparentKey = "azure-vnet transparent"

// hostVeth are azure-vnet's host veths (azv + hash) in both modes: on its
// bridge in bridge mode, on none in transparent mode.
var hostVeth = cniplug.HostVeth{
	Prefix:     VethPrefix,
	Plugin:     "azure-vnet",
	Routed:     "azure-vnet",
	RoutedKey:  transparentKey,
	Unbridged:  unbridged,
	NetworkKey: networkKey,
}

// unbridged is what a transparent host veth implies: the virtual gateways,
// the default routes via them, and the mode.
func unbridged(pod []netip.Prefix) ([]netip.Addr, []store.Route, map[string]string) {
	gws, routes := PodGateways(pod)
	return gws, routes, map[string]string{"mode": ModeTransparent}
}

// networkKey files an azure-vnet network under its bridge (default azure0)
// in bridge mode, under transparentKey in transparent mode.
func networkKey(typ string, conf []byte) (string, bool) {
	if typ != "azure-vnet" {
		return "", false
	}
	var c struct {
		Mode   string `json:"mode"`
		Bridge string `json:"bridge"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return "", false
	}
	switch {
	case strings.EqualFold(c.Mode, ModeTransparent):
		return transparentKey, true
	case c.Bridge == "":
		return Bridge, true
	}
	return c.Bridge, true
}

// isTransparent reports whether ep is an attachment in transparent mode.
func isTransparent(ep store.Endpoint) bool { return ep.Extra["mode"] == ModeTransparent }

// describe says how an attachment is laid out, for inspect endpoints.
func describe(ep store.Endpoint) string {
	switch {
	case ep.Plugin != "azure-vnet":
		return ""
	case isTransparent(ep):
		return "transparent (no bridge; the pod's gateway 169.254.1.1 is " + ep.HostVeth + " by proxy ARP, the node routes the pod's addresses to it)"
	}
	b := ep.Bridge
	if b == "" {
		b = "-"
	}
	return "bridge (" + b + " with the node's NIC; the fabric sees the NIC's MAC)"
}
