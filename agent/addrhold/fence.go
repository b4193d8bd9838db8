package addrhold

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/announce"
)

// Fence keeps the addresses of one election on the node's uplink to what
// the node holds. Owned by the election's goroutine.
type Fence struct {
	Host *netops.Handle
	Link string // the uplink
	T    Timing
	Log  *slog.Logger
	What string // starts the log lines

	// addrs: the addresses on the uplink, each with the renewal its
	// lifetime was last refreshed for; refreshed: when.
	addrs     map[netip.Addr]time.Time
	refreshed map[netip.Addr]time.Time
}

// Has reports whether ip is on the uplink by the fence's doing.
func (f *Fence) Has(ip netip.Addr) bool { _, ok := f.addrs[ip]; return ok }

// Sync brings the uplink in line with claims at now: an address the node
// holds is added, or its lifetime refreshed once per renewal while
// MayRefresh, and announced when it may have been gone; an address it no
// longer holds, or that no claim names, is removed at once.
func (f *Fence) Sync(now time.Time, claims map[netip.Addr]*Claim) {
	if f.addrs == nil {
		f.addrs, f.refreshed = map[netip.Addr]time.Time{}, map[netip.Addr]time.Time{}
	}
	for ip, cl := range claims {
		p := netip.PrefixFrom(ip, ip.BitLen())
		_, has := f.addrs[ip]
		switch {
		case cl.Holding(now):
			if f.addrs[ip].Equal(cl.Sent()) || !cl.MayRefresh(now) {
				continue
			}
			if err := f.Host.EnsureAddrLifetime(f.Link, p, f.T.Lifetime); err != nil {
				f.Log.Error(f.What+": cannot add an address to the uplink", "ip", ip, "uplink", f.Link, "err", err)
				continue
			}
			lapsed := !has || now.Sub(f.refreshed[ip]) >= f.T.Lifetime
			f.addrs[ip], f.refreshed[ip] = cl.Sent(), now
			if lapsed {
				if err := announce.Addr(f.Host, f.Link, ip); err != nil {
					f.Log.Warn(f.What+": cannot announce an address (gratuitous ARP or unsolicited neighbour advertisement); the LAN learns it at its next request", "ip", ip, "err", err)
				}
			}
		case has:
			f.drop(ip)
		}
	}
	for ip := range f.addrs {
		if claims[ip] == nil {
			f.drop(ip)
		}
	}
}

// drop removes ip from the uplink.
func (f *Fence) drop(ip netip.Addr) {
	if err := f.Host.DeleteAddr(f.Link, netip.PrefixFrom(ip, ip.BitLen())); err != nil {
		f.Log.Error(f.What+": cannot remove an address from the uplink; the kernel removes it when its lifetime ends", "ip", ip, "uplink", f.Link, "err", err)
	}
	delete(f.addrs, ip)
	delete(f.refreshed, ip)
}
