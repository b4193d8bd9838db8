package dhcp

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// Role is the dhcp IPAM plugin; `dhcp daemon` execs its daemon (cnibox-dhcp).
var Role = &cniplug.Role{
	Name: "dhcp",
	IPAM: true,
	About: "dhcp gets the pod's address from the LAN's DHCP server through the dhcp daemon " +
		"(`dhcp daemon`, listening on \"daemonSocketPath\", default /run/cni/dhcp.sock), which runs the DHCP " +
		"client in the pod's namespace, renews the lease for the pod's lifetime and keeps it in cnibox's store. " +
		"It reads \"request\", \"provide\" and \"priority\" as the reference plugin does.",
	Add:      cmdAdd,
	Check:    cmdCheck,
	Del:      cmdDel,
	GC:       cmdGC,
	Status:   cmdStatus,
	Commands: []cniplug.Command{{Name: "daemon", Run: runDaemon}},
}

// The verbs of Role, named functions so that Role is data (see cniplug.Role).
func cmdAdd(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	return cniplug.AddWithConf(ctx, a, loadConfig, add)
}

func cmdCheck(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, check)
}

func cmdDel(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, del)
}

func cmdGC(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, gc)
}

func cmdStatus(ctx context.Context, a *cniplug.Args) error {
	return cniplug.WithConf(ctx, a, loadConfig, status)
}
