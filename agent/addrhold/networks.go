//go:build !nokube

package addrhold

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/netops"
)

// NetworksAnnotation is the Node annotation in which each agent publishes
// the networks of its node's uplink (IPv4 and IPv6): the networks an
// address of an election may be held on.
const NetworksAnnotation = cluster.EgressNetworksAnnotation

// Networks publishes this node's uplink networks (NetworksAnnotation).
// Owned by its caller's goroutine. Two of them (the egress gateways' and
// the load balancers') write the same value.
type Networks struct {
	Core   rest.Interface // core/v1
	Node   string
	Host   *netops.Handle
	Uplink string
	Log    *slog.Logger
	What   string // starts the log lines

	published  string  // the value last written
	fwd4, fwd6 fwdNote // whether the node forwards IPv4, IPv6 (as last checked and said)
}

// Publish writes this node's uplink networks into its Node's
// NetworksAnnotation (through nodes/status, as the overlay's annotations:
// the right the agent has): the IPv4 ones while the node forwards IPv4
// (forwarding), the IPv6 ones while it forwards IPv6 (read, never set:
// forwarding turns off the acceptance of router advertisements, by which
// a node may have its IPv6 default route), so that no node counts on one
// that cannot forward to hold an address.
func (n *Networks) Publish(ctx context.Context) error {
	nets, err := n.uplinkNetworks()
	if err != nil {
		return err
	}
	v4, v6 := n.forwarding(), n.forwarding6()
	nets = slices.DeleteFunc(nets, func(p netip.Prefix) bool { return (p.Addr().Is4() && !v4) || (p.Addr().Is6() && !v6) })
	v := FormatNetworks(nets)
	if v == n.published {
		return nil
	}
	n.published = v
	ref := kubeapi.Ref{Resource: "nodes", Name: n.Node}
	err = kubeapi.PatchStatusMetadata(ctx, n.Core, ref, map[string]any{"annotations": map[string]any{NetworksAnnotation: n.published}})
	if err != nil {
		n.published = "-" // (written again next time)
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: %w", n.Node, err)
	}
	return err
}

// forwarding6 reports whether the node forwards IPv6
// (net.ipv6.conf.all.forwarding; false when it has no IPv6), and says so
// once a change: on a single-stack IPv6 cluster a node that does not
// forward IPv6 holds nothing.
func (n *Networks) forwarding6() bool {
	v, err := n.Host.Sysctl("net.ipv6.conf.all.forwarding")
	return n.note(&n.fwd6, err == nil && v == "1", err, slog.LevelInfo, "IPv6",
		"net.ipv6.conf.all.forwarding=0, which the agent never sets", "as kubeadm requires of an IPv6 cluster; the bridge role sets it with the node's first IPv6 pod")
}

// fwdNote is what the log last said of a family's forwarding.
type fwdNote struct{ on, said bool }

// note logs, once a change, whether the node forwards family (off: at
// level off, with why and the fix), and returns on.
func (n *Networks) note(s *fwdNote, on bool, err error, off slog.Level, family, why, fix string) bool {
	if on == s.on && s.said {
		return on
	}
	s.on, s.said = on, true
	if on {
		n.Log.Info(n.What + ": this node forwards " + family + ": it may hold " + family + " addresses")
	} else {
		n.Log.Log(context.Background(), off, n.What+": this node does not forward "+family+" ("+why+"): it holds no "+family+" address until it does (set it on the node, "+fix+")", "err", err)
	}
	return on
}

// forwarding reports whether the node forwards IPv4 (net.ipv4.ip_forward),
// turning it on when it can. The holder forwards traffic to other nodes'
// pods; a node without pods may not forward yet (the bridge role turns it
// on with its first pod; kubeadm asks for it), and an agent in a container
// without privileges cannot turn it on (/proc/sys is read-only there): it
// says so, once a change.
func (n *Networks) forwarding() bool {
	v, err := n.Host.Sysctl("net.ipv4.ip_forward")
	if err == nil && v != "1" {
		if err = n.Host.SetSysctl("net.ipv4.ip_forward", "1"); err == nil {
			v = "1"
		}
	}
	return n.note(&n.fwd4, err == nil && v == "1", err, slog.LevelWarn, "IPv4",
		"net.ipv4.ip_forward=0, and the agent cannot turn it on", "as kubeadm requires; the bridge role sets it with the node's first pod")
}

// uplinkNetworks are the networks of the uplink's addresses: IPv4 but
// its /32s, IPv6 but its /128s and link-local (held addresses are /32 and
// /128).
func (n *Networks) uplinkNetworks() ([]netip.Prefix, error) {
	ps, err := n.Host.Addrs(n.Uplink)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range ps {
		if p.Bits() < p.Addr().BitLen() && !p.Addr().IsLinkLocalUnicast() {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// ParseNetworks reads NetworksAnnotation's value (comma-separated
// prefixes; what does not parse is left out).
func ParseNetworks(v string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// FormatNetworks is NetworksAnnotation's value for ps.
func FormatNetworks(ps []netip.Prefix) string {
	ss := make([]string, 0, len(ps))
	for _, p := range ps {
		ss = append(ss, p.Masked().String())
	}
	return strings.Join(ss, ",")
}
