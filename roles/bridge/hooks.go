package bridge

import (
	"context"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Hooks add a role's own steps to the bridge verbs, for roles built on the
// bridge plugin through Verbs (azure-vnet, in roles/azurevnet). They,
// with Conf, Attachment, Verbs and the names of
// export.go, are the declared API another role package may use; the rest
// of bridge is its own. Every field is optional.
type Hooks struct {
	// VethPrefix replaces "cbx" as the prefix of host veth names (three
	// characters, so the name stays within 15).
	VethPrefix string
	// Parse checks the role's own fields of stdin after the bridge's.
	Parse func(a *cniplug.Args, c *Conf) error
	// Attach runs last in ADD, after the pod's veth, addresses, routes and
	// masquerade entries are in place (the endpoint record is written before
	// any of them). The undo it returns runs if a later step fails.
	Attach func(ctx context.Context, at *Attachment) (undo func(), err error)
	// Detach runs in DEL after the masquerade entries are removed and
	// before the pod's addresses are freed (with the store's lock held) and
	// the host veth is deleted, with those addresses: from the endpoint
	// record, else prevResult, else, with ipMasq, what is left of them;
	// none when all are gone. host stays open across the veth delete.
	Detach func(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle, ips []netip.Addr) error
	// GC runs in GC after the stale veths are gone, with every endpoint
	// record of the network (a.Conf.Keeps tells the kept ones).
	GC func(ctx context.Context, a *cniplug.Args, c *Conf, host *netops.Handle, eps []store.Endpoint) error
}

// Attachment is what ADD set up, for Hooks.Attach.
type Attachment struct {
	Args                      *cniplug.Args
	Conf                      *Conf
	Host, Pod                 *netops.Handle
	Bridge, HostVeth, PodVeth netops.Link
	// Result is the ADD result so far; Attach may add to it.
	Result *current.Result
}

func (c *Conf) parseHook(a *cniplug.Args) error {
	if c.hooks == nil || c.hooks.Parse == nil {
		return nil
	}
	return c.hooks.Parse(a, c)
}

func (c *Conf) attachHook(ctx context.Context, undo *cniplug.Undo, at *Attachment) error {
	if c.hooks == nil || c.hooks.Attach == nil {
		return nil
	}
	u, err := c.hooks.Attach(ctx, at)
	if u != nil {
		undo.Push(u)
	}
	return err
}

func (c *Conf) detachHook(ctx context.Context, a *cniplug.Args, host *netops.Handle, ips []netip.Addr) error {
	if c.hooks == nil || c.hooks.Detach == nil {
		return nil
	}
	return c.hooks.Detach(ctx, a, c, host, ips)
}

func (c *Conf) gcHook(ctx context.Context, a *cniplug.Args, host *netops.Handle, eps []store.Endpoint) error {
	if c.hooks == nil || c.hooks.GC == nil {
		return nil
	}
	return c.hooks.GC(ctx, a, c, host, eps)
}
