package firewall

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops/nft"
)

const (
	// DefaultAdminChain is the reference's default iptablesAdminChainName.
	DefaultAdminChain = "CNI-ADMIN"
	// DefaultZone is the reference's default firewalldZone.
	DefaultZone = "trusted"
	// maxChainName is iptables' longest chain name (XT_EXTENSION_MAXNAMELEN
	// less its NUL, less the 'lt' the reference keeps free): 28.
	maxChainName = 28
)

// Backends of the "backend" field.
const (
	backendAuto      = ""
	backendIptables  = "iptables"
	backendFirewalld = "firewalld"
)

// firewallConf is the config as written, field names as in the reference
// plugin v1.9.1.
type firewallConf struct {
	Backend                string `json:"backend"`
	IptablesAdminChainName string `json:"iptablesAdminChainName"`
	FirewalldZone          string `json:"firewalldZone"`
	IngressPolicy          string `json:"ingressPolicy"`
}

// parseConf decodes and validates the firewall fields, filling in the
// defaults.
func parseConf(a *cniplug.Args) (*firewallConf, error) {
	var c firewallConf
	if err := cniplug.DecodeConf("firewall config", a.StdinData, &c); err != nil {
		return nil, err
	}
	switch c.Backend {
	case backendAuto, backendIptables, backendFirewalld:
	default:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, `config field "backend": %q is not a firewall backend: use "iptables", "firewalld" or leave it out`, c.Backend)
	}
	if c.IptablesAdminChainName == "" {
		c.IptablesAdminChainName = DefaultAdminChain
	}
	if err := checkChainName(c.IptablesAdminChainName); err != nil {
		return nil, err
	}
	if c.FirewalldZone == "" {
		c.FirewalldZone = DefaultZone
	}
	switch c.IngressPolicy {
	case "":
		c.IngressPolicy = nft.IngressOpen
	case nft.IngressOpen, nft.IngressSameBridge, nft.IngressIsolated:
	default:
		return nil, cniplug.Errorf(types.ErrUnsupportedField, `config field "ingressPolicy": %q is not a policy: use "open", "same-bridge" or "isolated"`, c.IngressPolicy)
	}
	return &c, nil
}

// checkChainName refuses an admin chain name iptables could not show or
// that is one of the chains the firewall itself uses.
func checkChainName(n string) error {
	switch {
	case len(n) > maxChainName:
		return cniplug.ConfError("iptablesAdminChainName", "%q is %d characters long: iptables chain names have at most %d", n, len(n), maxChainName)
	case strings.IndexFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f || r > 0x7e || r == '!' }) >= 0:
		return cniplug.ConfError("iptablesAdminChainName", "%q contains a space, control or non-ASCII character: use a name like %s", n, DefaultAdminChain)
	case n == nft.FirewallForwardChain || n == nft.FirewallIsolationChain || n == "FORWARD" || n == "INPUT" || n == "OUTPUT":
		return cniplug.ConfError("iptablesAdminChainName", "%q is a chain the firewall or iptables uses itself: pick another name, e.g. %s", n, DefaultAdminChain)
	}
	return nil
}

// ownerPrefix is how the owner comments of a network's rules begin: a
// fixed-length hash of the name, so one network's prefix is never another's.
func ownerPrefix(network string) string {
	h := sha256.Sum256([]byte(network))
	return "cnibox/" + hex.EncodeToString(h[:4]) + "/"
}

// owner is the comment on the rules of an attachment: the network's prefix,
// the container ID and ifname (hashed when that would pass iptables' 255
// characters of comment).
func owner(network, containerID, ifname string) string {
	s := ownerPrefix(network) + containerID + "/" + ifname
	if len(s) <= 255 {
		return s
	}
	h := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return ownerPrefix(network) + "h:" + hex.EncodeToString(h[:16])
}
