package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Hooks add a role's own steps to the bridge verbs, for roles built on the
// bridge plugin with NewWithHooks (azure-vnet). Every field is optional.
type Hooks struct {
	// VethPrefix replaces "cbx" as the prefix of host veth names (three
	// characters, so the name stays within 15).
	VethPrefix string
	// Parse checks the role's own fields of stdin after the bridge's.
	Parse func(a *cniplug.Args, c *Conf) error
	// Attach runs in ADD after the pod's veth, addresses, routes and
	// masquerade entries are in place, before the endpoint record. The undo
	// it returns runs if a later step fails.
	Attach func(ctx context.Context, at *Attachment) (undo func(), err error)
	// Detach runs in DEL before the host veth is deleted, with the pod's
	// addresses (from the endpoint record or prevResult; none when both are
	// gone). host stays open across the veth delete.
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

// NewWithHooks is New with hooks: a role on the bridge plugin's verbs with
// steps of its own.
func NewWithHooks(name, about string, defaults Conf, hooks *Hooks) *cniplug.Role {
	defaults.hooks = hooks
	return New(name, about, defaults)
}

// hostVethName is the host end name of an attachment with c's prefix.
func (c *Conf) hostVethName(containerID, ifname string) string {
	if c.hooks == nil || c.hooks.VethPrefix == "" {
		return hostVethName(containerID, ifname)
	}
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return c.hooks.VethPrefix + hex.EncodeToString(sum[:6])
}

// isOurVeth reports whether a link name has the shape of c's host veths.
func (c *Conf) isOurVeth(name string) bool {
	if c.hooks == nil || c.hooks.VethPrefix == "" {
		return isOurVeth(name)
	}
	p := c.hooks.VethPrefix
	return len(name) == len(p)+12 && strings.HasPrefix(name, p)
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
