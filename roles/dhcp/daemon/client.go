package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
)

// clientID is the DHCP client identifier of an attachment, as the
// reference builds it: containerID/network/ifname, at most 254 bytes.
func clientID(network, containerID, ifname string) string {
	id := containerID + "/" + network + "/" + ifname
	if len(id) > 254 {
		id = id[:254]
	}
	return id
}

// nsPath is the path of a pod's namespace as the daemon sees it.
func (d *Daemon) nsPath(netns string) string {
	if netns == "" || d.o.HostPrefix == "" {
		return netns
	}
	return d.o.HostPrefix + netns
}

// openClient opens a DHCP client on ifname inside the namespace at nsPath;
// its socket keeps the namespace alive until it is closed.
func (d *Daemon) openClient(nsPath, ifname string) (c *nclient4.Client, mac net.HardwareAddr, err error) {
	// The main role creates the device down; DHCP needs it up.
	h, err := netops.Open(nsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("open the pod's namespace: %w", err)
	}
	err = h.SetLinkUp(ifname)
	h.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("set %q up in namespace %q: %w", ifname, nsPath, err)
	}
	err = netops.InNetns(nsPath, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("interface %q in namespace %q: %w", ifname, nsPath, err)
		}
		mac = ifc.HardwareAddr
		first := 2 * time.Second
		if first > d.o.ResendMax {
			first = d.o.ResendMax
		}
		c, err = nclient4.New(ifname, nclient4.WithTimeout(first), nclient4.WithRetry(-1))
		if err != nil {
			return fmt.Errorf("open a DHCP client on %q in namespace %q: %w", ifname, nsPath, err)
		}
		return nil
	})
	return c, mac, err
}

// modifiers are the options every message of an attachment carries.
func (d *Daemon) modifiers(rec *lease.Lease) []dhcpv4.Modifier {
	mods := []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte(rec.ClientID)))}
	if d.o.Broadcast {
		mods = append(mods, dhcpv4.WithBroadcast(true))
	}
	for _, p := range rec.Provide {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(p.Code), []byte(p.Value))))
	}
	if len(rec.Request) > 0 {
		codes := make([]dhcpv4.OptionCode, len(rec.Request))
		for i, c := range rec.Request {
			codes[i] = dhcpv4.GenericOptionCode(c)
		}
		mods = append(mods, dhcpv4.WithRequestedOptions(codes...))
	}
	return mods
}

// acquire runs DISCOVER/OFFER/REQUEST/ACK within the daemon's timeout. A
// NAK (the offered address went to another client first, as happens when
// many pods ask at once) starts over with a DISCOVER, as RFC 2131 says.
func (d *Daemon) acquire(ctx context.Context, c *nclient4.Client, rec *lease.Lease) (*nclient4.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	for {
		l, err := c.Request(ctx, d.modifiers(rec)...)
		var nak *nclient4.ErrNak
		if err == nil || !errors.As(err, &nak) || ctx.Err() != nil {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
		}
	}
}

// bind copies what an ACK says into rec.
func bind(rec *lease.Lease, ack *dhcpv4.DHCPv4, now time.Time) {
	ones, _ := ack.SubnetMask().Size()
	if ack.SubnetMask() == nil {
		ones = 32
	}
	addr, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	rec.Address = netip.PrefixFrom(addr, ones).String()
	rec.Server = ack.ServerIdentifier().String()
	rec.State = lease.Bound
	if rec.Acquired.IsZero() {
		rec.Acquired = now
	}
	rec.Renewed = now
	rec.Expires = now.Add(ack.IPAddressLeaseTime(time.Hour))
	rec.Ack = ack.ToBytes()
}

// timers returns T1 and T2 of an ACK received at renewed.
func timers(ack *dhcpv4.DHCPv4, renewed time.Time) (t1, t2, expiry time.Time) {
	lt := ack.IPAddressLeaseTime(time.Hour)
	return renewed.Add(ack.IPAddressRenewalTime(lt / 2)), renewed.Add(ack.IPAddressRebindingTime(lt * 7 / 8)), renewed.Add(lt)
}

// leaseOf is what the role returns from an ACK: the address, the router,
// the routes (option 121 when given, RFC 3442: it replaces the router as
// the source of routes; else a default route via the router) and DNS.
func leaseOf(rec *lease.Lease, ack *dhcpv4.DHCPv4) *proto.Lease {
	l := &proto.Lease{Address: rec.Address, Server: rec.Server, Expires: rec.Expires}
	if r := ack.Router(); len(r) > 0 {
		l.Gateway = r[0].String()
	}
	if cr := ack.ClasslessStaticRoute(); len(cr) > 0 {
		for _, r := range cr {
			rt := proto.Route{Dst: r.Dest.String()}
			if r.Router != nil && !r.Router.IsUnspecified() {
				rt.GW = r.Router.String()
			}
			l.Routes = append(l.Routes, rt)
		}
	} else if l.Gateway != "" {
		l.Routes = append(l.Routes, proto.Route{Dst: "0.0.0.0/0", GW: l.Gateway})
	}
	for _, ip := range ack.DNS() {
		l.DNS.Nameservers = append(l.DNS.Nameservers, ip.String())
	}
	l.DNS.Domain = ack.DomainName()
	if s := ack.DomainSearch(); s != nil {
		l.DNS.Search = s.Labels
	}
	return l
}
