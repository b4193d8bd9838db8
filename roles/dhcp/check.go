package dhcp

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// check asks the daemon whether it holds a bound lease for the attachment
// whose address is on the interface (the daemon looks), and that the
// previous result, when given, has that address.
func check(ctx context.Context, a *cniplug.Args, cfg *config) error {
	resp, err := call(ctx, cfg, request(proto.OpCheck, a, cfg), shortTimeout, types.ErrTryAgainLater)
	if err != nil {
		return err
	}
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil || resp.Lease == nil {
		return err
	}
	want, _ := netip.ParsePrefix(resp.Lease.Address)
	for _, ip := range prev.IPs {
		if got, ok := netip.AddrFromSlice(ip.Address.IP); ok && got.Unmap() == want.Addr() {
			return nil
		}
	}
	return cniplug.Errorf(types.ErrUnknownContainer, "dhcp: the lease of %s is %s, which the previous result lacks: run DEL and ADD again", a.IfName, want)
}
