package static

import (
	"context"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// check validates the config (the parse of its ConfVerbs) and, when the runtime
// passes the previous result, that every configured address is in it.
func check(_ context.Context, a *cniplug.Args, cfg *config) error {
	prev, err := a.Conf.PrevResult()
	if err != nil || prev == nil {
		return err
	}
	for _, ad := range cfg.Addresses {
		found := false
		for _, ip := range prev.IPs {
			got, ok := netip.AddrFromSlice(ip.Address.IP)
			if ok && got.Unmap() == ad.Addr.Addr() {
				found = true
				if ad.Gateway.IsValid() {
					gw, _ := netip.AddrFromSlice(ip.Gateway)
					if gw.Unmap() != ad.Gateway {
						return cniplug.Errorf(types.ErrUnknownContainer, "static: address %s has gateway %v in the previous result, the config says %s: run DEL and ADD again", ad.Addr, ip.Gateway, ad.Gateway)
					}
				}
				break
			}
		}
		if !found {
			return cniplug.Errorf(types.ErrUnknownContainer, "static: address %s of the config is not in the previous result of interface %s: run DEL and ADD again", ad.Addr, a.IfName)
		}
	}
	return nil
}
