package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/roles/dhcp/proto"
	"github.com/cnibox/cnibox/store"
)

// CNI error codes the daemon answers with.
const (
	codeUnknownContainer = 3
	codeInvalidEnv       = 4
	codeIO               = 5
	codeTryAgain         = 11
)

func fail(code uint, format string, args ...any) *proto.Response {
	return &proto.Response{Error: fmt.Sprintf(format, args...), Code: code}
}

// handle answers one request of the role.
func (d *Daemon) handle(ctx context.Context, req *proto.Request) *proto.Response {
	switch req.Op {
	case proto.OpStatus:
		return &proto.Response{}
	case proto.OpGC:
		return d.gc(req)
	}
	if req.Network == "" || req.ContainerID == "" || req.IfName == "" {
		return fail(codeInvalidEnv, "%s needs the network name, CNI_CONTAINERID and CNI_IFNAME", req.Op)
	}
	switch req.Op {
	case proto.OpAdd:
		return d.add(ctx, req)
	case proto.OpDel:
		return d.del(req.Network, req.ContainerID, req.IfName)
	case proto.OpCheck:
		return d.check(req)
	}
	return fail(codeInvalidEnv, "unknown operation %q", req.Op)
}

// entry returns the attachment of key, creating it when create is set.
func (d *Daemon) entry(key string, create bool) *attachment {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.leases[key]
	if a == nil && create {
		a = &attachment{}
		d.leases[key] = a
	}
	return a
}

// add acquires a lease (or returns the one held) and starts renewing it.
func (d *Daemon) add(ctx context.Context, req *proto.Request) *proto.Response {
	if req.Netns == "" {
		return fail(codeInvalidEnv, "ADD needs CNI_NETNS: the DHCP client runs in the pod's namespace")
	}
	key := attKey(req.Network, req.ContainerID, req.IfName)
	a := d.entry(key, true)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bound && a.lease != nil {
		return &proto.Response{Lease: leaseOf(&a.rec, a.lease.ACK)}
	}
	nsPath := d.nsPath(req.Netns)
	c, mac, err := d.openClient(nsPath, req.IfName)
	if err != nil {
		d.forget(key, a)
		if errors.Is(err, netops.ErrNotFound) {
			return fail(codeUnknownContainer, "%v", err)
		}
		return fail(codeIO, "%v", err)
	}
	rec := lease.Lease{
		Network: req.Network, ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns, Pod: req.Pod,
		ClientID: clientID(req.Network, req.ContainerID, req.IfName), MAC: mac.String(), Request: req.Request,
		Provide: req.Provide,
	}
	for _, p := range req.Provide {
		if p.Code == 12 {
			rec.Hostname = p.Value
		}
	}
	l, err := d.acquire(ctx, c, &rec)
	if err != nil {
		c.Close()
		d.forget(key, a)
		var nak *nclient4.ErrNak
		if errors.As(err, &nak) {
			return fail(codeIO, "the DHCP server refused %s in namespace %s (NAK)", req.IfName, req.Netns)
		}
		return fail(codeTryAgain, "no DHCP lease for %s in namespace %s within %s (the daemon's -timeout): %v: is a DHCP server on that interface's network?", req.IfName, req.Netns, d.o.Timeout, err)
	}
	bind(&rec, l.ACK, time.Now().UTC())
	if err := d.withStore(func(st *store.Store) error { return lease.Records.In(st).Put(rec) }); err != nil {
		_ = c.Release(l, d.modifiers(&rec)...)
		c.Close()
		d.forget(key, a)
		return fail(codeIO, "record the lease of %s: %v", req.IfName, err)
	}
	a.rec, a.client, a.lease, a.bound = rec, c, l, true
	a.ns, _ = os.Open(nsPath)
	d.log.Printf("leased %s to %s (netns %s) from %s until %s", rec.Address, rec.ClientID, rec.Netns, rec.Server, rec.Expires.Format(time.RFC3339))
	d.startLoop(context.WithoutCancel(ctx), a)
	return &proto.Response{Lease: leaseOf(&rec, l.ACK)}
}

// forget drops a failed attachment from the table (a.mu held).
func (d *Daemon) forget(key string, a *attachment) {
	d.mu.Lock()
	if d.leases[key] == a {
		delete(d.leases, key)
	}
	d.mu.Unlock()
}

// del releases the attachment's lease and forgets it; none is success.
func (d *Daemon) del(network, containerID, ifname string) *proto.Response {
	key := attKey(network, containerID, ifname)
	if a := d.entry(key, false); a != nil {
		a.stopLoop()
		a.mu.Lock()
		d.release(a)
		a.closeClient()
		a.bound = false
		d.forget(key, a)
		a.mu.Unlock()
	} else {
		// Not in memory: a lease the store still lists (its namespace was
		// gone when the daemon started) is released from the daemon's own
		// namespace, as far as it reaches the server.
		var rec lease.Lease
		var found bool
		_ = d.withStore(func(st *store.Store) (err error) {
			rec, found, err = lease.Records.In(st).Get(network, containerID, ifname)
			return err
		})
		if found {
			d.releaseFromHost(rec)
		}
	}
	if err := d.withStore(func(st *store.Store) error { return lease.Records.In(st).Delete(network, containerID, ifname) }); err != nil {
		return fail(codeIO, "forget the lease of %s/%s/%s: %v", network, containerID, ifname, err)
	}
	return &proto.Response{}
}

// release sends DHCPRELEASE from the leased address in the pod's
// namespace (a.mu held): a unicast from 0.0.0.0, as the raw client would
// send it, is a martian the server's kernel drops.
func (d *Daemon) release(a *attachment) {
	if a.lease == nil {
		return
	}
	if a.ns == nil {
		d.releaseFromHost(a.rec)
		return
	}
	err := netops.InNetns(fmt.Sprintf("/proc/self/fd/%d", a.ns.Fd()), func() error { return d.sendRelease(a.rec, true) })
	if err != nil {
		// The pod's interface is gone (a GC of the main role deletes it
		// first): try from the daemon's own namespace.
		d.log.Printf("release %s of %s from the pod's namespace: %v", a.rec.Address, a.rec.ClientID, err)
		d.releaseFromHost(a.rec)
		return
	}
	d.log.Printf("released %s of %s", a.rec.Address, a.rec.ClientID)
}

// sendRelease sends the DHCPRELEASE of rec to its server over UDP, from the
// leased address when fromLease is set.
func (d *Daemon) sendRelease(rec lease.Lease, fromLease bool) error {
	ack, err := dhcpv4.FromBytes(rec.Ack)
	if err != nil {
		return err
	}
	msg, err := dhcpv4.NewReleaseFromACK(ack, d.modifiers(&rec)...)
	if err != nil {
		return err
	}
	server := &net.UDPAddr{IP: net.ParseIP(rec.Server), Port: 67}
	var local *net.UDPAddr
	if fromLease {
		local = &net.UDPAddr{IP: ack.YourIPAddr, Port: 68}
	}
	c, err := net.DialUDP("udp4", local, server)
	if err != nil && fromLease {
		c, err = net.DialUDP("udp4", nil, server) // the address is gone from the interface
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write(msg.ToBytes())
	return err
}

// releaseFromHost sends DHCPRELEASE for rec from a UDP socket of the
// daemon's namespace: the best it can do when the pod's namespace is gone.
func (d *Daemon) releaseFromHost(rec lease.Lease) {
	if err := d.sendRelease(rec, false); err != nil {
		d.log.Printf("release %s of %s (namespace gone): %v; the server keeps it until %s", rec.Address, rec.ClientID, err, rec.Expires.Format(time.RFC3339))
		return
	}
	d.log.Printf("released %s of %s from the daemon's namespace (the pod's is gone)", rec.Address, rec.ClientID)
}

// check reports the held lease, and fails when it is not bound or its
// address is not on the interface.
func (d *Daemon) check(req *proto.Request) *proto.Response {
	a := d.entry(attKey(req.Network, req.ContainerID, req.IfName), false)
	if a == nil {
		return fail(codeUnknownContainer, "the daemon holds no lease for %s of container %s: run DEL and ADD again", req.IfName, req.ContainerID)
	}
	a.mu.Lock()
	rec, held := a.rec, a.lease
	a.mu.Unlock()
	if rec.State != lease.Bound || held == nil {
		return fail(codeUnknownContainer, "the lease %s of %s expired at %s: run DEL and ADD again", rec.Address, req.IfName, rec.Expires.Format(time.RFC3339))
	}
	want, _ := netip.ParsePrefix(rec.Address)
	found := false
	err := netops.InNetns(d.nsPath(req.Netns), func() error {
		ifc, err := net.InterfaceByName(req.IfName)
		if err != nil {
			return err
		}
		addrs, err := ifc.Addrs()
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok && n.IP.Equal(net.IP(want.Addr().AsSlice())) {
				found = true
			}
		}
		return err
	})
	if err != nil {
		return fail(codeUnknownContainer, "interface %s in %s: %v", req.IfName, req.Netns, err)
	}
	if !found {
		return fail(codeUnknownContainer, "the leased address %s is not on %s in %s: run DEL and ADD again", rec.Address, req.IfName, req.Netns)
	}
	return &proto.Response{Lease: leaseOf(&rec, held.ACK)}
}

// gc releases the network's leases whose attachment is not in req.Keep.
func (d *Daemon) gc(req *proto.Request) *proto.Response {
	if req.Network == "" {
		return fail(codeInvalidEnv, "GC needs the network name")
	}
	keep := map[string]bool{}
	for _, k := range req.Keep {
		keep[attKey(req.Network, k.ContainerID, k.IfName)] = true
	}
	var recs []lease.Lease
	if err := d.withStore(func(st *store.Store) (err error) {
		recs, err = lease.Records.In(st).List(req.Network)
		return err
	}); err != nil {
		return fail(codeIO, "read the leases of %s: %v", req.Network, err)
	}
	for _, r := range recs {
		if !keep[attKey(r.Network, r.ContainerID, r.IfName)] {
			if resp := d.del(r.Network, r.ContainerID, r.IfName); resp.Error != "" {
				return resp
			}
		}
	}
	return &proto.Response{}
}

// adopt takes over the leases in the store: those of live namespaces are
// renewed from now on, the others released.
func (d *Daemon) adopt(ctx context.Context) {
	var recs []lease.Lease
	if err := d.withStore(func(st *store.Store) (err error) {
		recs, err = lease.Records.In(st).List("")
		return err
	}); err != nil {
		d.log.Printf("read the leases to adopt: %v", err)
		return
	}
	for _, rec := range recs {
		ack, err := dhcpv4.FromBytes(rec.Ack)
		if err != nil {
			d.log.Printf("lease of %s: its ACK cannot be read (%v): forgotten", rec.ClientID, err)
			d.del(rec.Network, rec.ContainerID, rec.IfName)
			continue
		}
		c, _, err := d.openClient(d.nsPath(rec.Netns), rec.IfName)
		if err != nil {
			d.log.Printf("lease %s of %s: %v: releasing it", rec.Address, rec.ClientID, err)
			d.del(rec.Network, rec.ContainerID, rec.IfName)
			continue
		}
		a := d.entry(attKey(rec.Network, rec.ContainerID, rec.IfName), true)
		a.mu.Lock()
		a.rec, a.client, a.bound = rec, c, true
		a.ns, _ = os.Open(d.nsPath(rec.Netns))
		a.lease = &nclient4.Lease{Offer: ack, ACK: ack, CreationTime: rec.Renewed}
		d.startLoop(ctx, a)
		a.mu.Unlock()
		d.log.Printf("adopted %s of %s (netns %s), expires %s", rec.Address, rec.ClientID, rec.Netns, rec.Expires.Format(time.RFC3339))
	}
}
