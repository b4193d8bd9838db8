package azurevnet

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/internal/attach"
)

// Bridge is azure-vnet's bridge when the config names none.
const Bridge = "azure0"

// VethPrefix starts the name of every host veth of azure-vnet, in both
// modes: "azv" + 12 hex digits of sha256(container ID, ifname).
const VethPrefix = "azv"

// HostVethName is the host veth of an attachment, in either mode.
func HostVethName(containerID, ifname string) string {
	return attach.VethName(VethPrefix, containerID, ifname)
}

// IsHostVeth reports whether a link name has the shape of azure-vnet's
// host veths.
func IsHostVeth(name string) bool { return attach.IsVethName(VethPrefix, name) }

// Role is azure-vnet. "mode": "transparent" routes each pod through its own
// host veth (transparent.go); bridge mode, the default, is the bridge role
// with bridge azure0 and host veths azv<hash>, plus the node's NIC (found
// by the pod subnet, or "master") enslaved to the bridge with its addresses
// and routes, and nftables rules that make the fabric see only the NIC's
// MAC, as Azure's ebtables rules do.
var Role = &cniplug.Role{
	Name: "azure-vnet",
	About: "azure-vnet connects pods to the VNet like Azure CNI. \"mode\": \"transparent\" (what AKS ships): a veth pair per pod, " +
		"no bridge, the node's NIC left alone; the host end answers ARP for the pod's gateway 169.254.1.1 (proxy ARP) and the " +
		"node routes each pod address to it. \"mode\": \"bridge\" (the default): the pod's veth on bridge \"bridge\" (default " +
		"azure0) with the node's NIC enslaved once, its addresses and routes moved to the bridge; nftables bridge rules rewrite " +
		"MACs so the fabric only sees the NIC's. Addresses come from the ipam section (azure-vnet-ipam hands out the NIC's secondary IPs).",
	Verbs: &cniplug.ConfVerbs[cniplug.NoConf]{Add: add, Check: check, Del: del, GC: gc, Status: attach.Status[cniplug.NoConf]},
	Known: &known,
}

// bridgeMode is azure-vnet's bridge mode: the bridge role's verbs with
// bridge azure0 unless the config says otherwise, and azure-vnet's steps.
var bridgeMode = bridge.Verbs{
	Defaults: bridge.Conf{Bridge: Bridge},
	Hooks:    &bridge.Hooks{VethPrefix: VethPrefix, Parse: parse, Attach: attachFabric, Detach: detachFabric, GC: gcFabric},
}

func add(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) (types.Result, error) {
	z, err := fields(a)
	if err != nil {
		return nil, err
	}
	if z.Mode == ModeTransparent {
		c, err := parseTransparent(a, z)
		if err != nil {
			return nil, err
		}
		return addTransparent(ctx, a, c)
	}
	return bridgeMode.Add(ctx, a)
}

// check and gc run the transparent verb when the config says that mode,
// else the bridge mode's.
func check(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	return byMode(ctx, a, checkTransparent, bridgeMode.Check)
}

func gc(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	return byMode(ctx, a, attach.OnHost(gcTransparent), bridgeMode.GC)
}

// byMode runs transparent with the transparent config when the config says
// that mode, else bridged.
func byMode(ctx context.Context, a *cniplug.Args, transparent func(context.Context, *cniplug.Args, *tconf) error, bridged func(context.Context, *cniplug.Args) error) error {
	z, err := fields(a)
	if err != nil {
		return err
	}
	if z.Mode != ModeTransparent {
		return bridged(ctx, a)
	}
	c, err := parseTransparent(a, z)
	if err != nil {
		return err
	}
	return transparent(ctx, a, c)
}

// del removes the attachment as the mode of its endpoint record says (the
// config's mode when there is none), so pods added before the config
// changed mode are still removed whole. A config that ADD would refuse
// does not stop it (cniplug.ParseForDel).
func del(ctx context.Context, a *cniplug.Args, _ cniplug.NoConf) error {
	z, err := cniplug.ParseForDel(a, fields)
	if err != nil {
		return err
	}
	mode, err := recordedMode(a, z)
	if err != nil {
		return err
	}
	if mode == ModeTransparent {
		c, err := cniplug.ParseForDel(a, transparentConf)
		if err != nil {
			return err
		}
		return attach.OnHost(delTransparent)(ctx, a, c)
	}
	return bridgeMode.Del(ctx, a)
}

// transparentConf parses the config of the transparent mode, its common
// fields first.
func transparentConf(a *cniplug.Args) (*tconf, error) {
	z, err := fields(a)
	if err != nil {
		return nil, err
	}
	return parseTransparent(a, z)
}

// recordedMode is the mode of the attachment's endpoint record: transparent
// when it says so, bridge when it names a bridge, else the config's.
func recordedMode(a *cniplug.Args, z conf) (string, error) {
	st, err := attach.OpenStore(a, z.DataDir)
	if err != nil {
		return "", err
	}
	defer st.Close()
	ep, found, err := st.GetEndpoint(a.Conf.Name, a.ContainerID, a.IfName)
	switch {
	case err != nil:
		return "", cniplug.WithCode(types.ErrIOFailure, err)
	case found && ep.Extra["mode"] == ModeTransparent:
		return ModeTransparent, nil
	case found && ep.Bridge != "":
		return ModeBridge, nil
	}
	return z.Mode, nil
}
