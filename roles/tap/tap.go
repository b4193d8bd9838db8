// Package tap is the "tap" main plugin: a persistent tap device made in the
// pod as CNI_IFNAME, for a VM-in-pod runtime (KubeVirt-style) whose VM
// attaches to it, with the addresses and routes from IPAM when there is an
// ipam section (without one the tap is only up: layer 2). "bridge" puts it
// on a bridge of the pod instead.
//
// It is a masterless device kind of roles/internal/lower (the kernel calls
// a tap a "tun" device): lower parses the fields it shares (mtu, mac, dns,
// dataDir), runs ADD's record, device, plan and undo, and DEL, GC and most
// of CHECK.
package tap

import (
	"context"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/roles/internal/lower"
)

// spec is the tap device kind, under the kernel's kind "tun". Its MAC is
// the config's (or the mac capability's) and it announces its addresses
// when it comes up, as the reference does (arp_notify).
var spec = lower.Spec{Kind: "tun", Modes: []string{""}, MAC: true, Notify: true}

// Role is the "tap" role.
var Role = &cniplug.Role{
	Name: "tap",
	About: "tap makes a persistent tap device in the pod as CNI_IFNAME for a VM-in-pod runtime to attach to, " +
		"with \"mtu\", \"mac\" (or the mac capability), \"multiQueue\", \"owner\" and \"group\" (who may attach " +
		"without CAP_NET_ADMIN), \"selinuxContext\", and either the addresses and routes of the ipam section or " +
		"(\"bridge\") a port of a bridge of the pod.",
	Verbs: &cniplug.ConfVerbs[conf]{Parse: parse, Add: add, Check: check,
		ParseDel: parseLower, Del: del, ParseGC: parseLower, GC: gc,
		ParseStatus: cniplug.Unparsed[conf], Status: attach.Status[conf]},
	Known: &known,
}

// parseLower reads only lower's fields: DEL and GC are lower's.
func parseLower(a *cniplug.Args) (conf, error) {
	lc, err := spec.ParseConf(a)
	return conf{Conf: lc}, err
}

// del and gc are lower's.
func del(ctx context.Context, a *cniplug.Args, c conf) error { return lower.Del(ctx, a, c.Conf) }
func gc(ctx context.Context, a *cniplug.Args, c conf) error  { return lower.GC(ctx, a, c.Conf) }
