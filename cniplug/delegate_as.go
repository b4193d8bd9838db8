package cniplug

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
)

// The *As variants delegate with another CNI_IFNAME than the caller's: a meta
// role that gives a pod several interfaces (multi) runs each network's
// plugins with that network's interface name. Everything else (container,
// netns, CNI_ARGS, CNI_PATH, in-process or exec) is as in DelegateAdd.

// DelegateAddAs runs ADD of plugin type typ with conf and CNI_IFNAME ifname.
func (a *Args) DelegateAddAs(ctx context.Context, typ string, conf []byte, ifname string) (types.Result, error) {
	return a.withIfName(ifname).DelegateAdd(ctx, typ, conf)
}

// DelegateDelAs runs DEL of plugin type typ with conf and CNI_IFNAME ifname.
func (a *Args) DelegateDelAs(ctx context.Context, typ string, conf []byte, ifname string) error {
	return a.withIfName(ifname).DelegateDel(ctx, typ, conf)
}

// DelegateCheckAs runs CHECK of plugin type typ with conf and CNI_IFNAME ifname.
func (a *Args) DelegateCheckAs(ctx context.Context, typ string, conf []byte, ifname string) error {
	return a.withIfName(ifname).DelegateCheck(ctx, typ, conf)
}

// DelegateGCAs runs GC of plugin type typ with conf and CNI_IFNAME ifname
// (GC acts on the attachments listed in conf; the ifname is only passed on).
func (a *Args) DelegateGCAs(ctx context.Context, typ string, conf []byte, ifname string) error {
	return a.withIfName(ifname).DelegateGC(ctx, typ, conf)
}

// withIfName returns a copy of a with IfName replaced.
func (a *Args) withIfName(ifname string) *Args {
	b := *a
	b.IfName = ifname
	return &b
}
