package daemon

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/store"
)

// attachment is one pod interface the daemon holds a lease for.
type attachment struct {
	mu     sync.Mutex // serialises the exchanges of this attachment only
	rec    lease.Lease
	client *nclient4.Client
	lease  *nclient4.Lease
	// ns is the pod's namespace, held open so that DEL can send the
	// release from it even after the runtime unmounted it.
	ns    *os.File
	bound bool

	stop chan struct{} // closed to end the renewal loop
	done chan struct{} // closed when the loop has ended
}

func attKey(network, containerID, ifname string) string {
	return network + "\x00" + containerID + "\x00" + ifname
}

// closeClient closes the client (a.mu held).
func (a *attachment) closeClient() {
	if a.client != nil {
		a.client.Close()
		a.client = nil
	}
	if a.ns != nil {
		a.ns.Close()
		a.ns = nil
	}
}

// stopLoop ends the renewal loop and waits for it.
func (a *attachment) stopLoop() {
	a.mu.Lock()
	stop, done := a.stop, a.done
	a.stop, a.done = nil, nil
	a.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// startLoop starts the renewal loop (a.mu held).
func (d *Daemon) startLoop(ctx context.Context, a *attachment) {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go d.renewLoop(ctx, a, a.stop, a.done)
}

// renewLoop renews at T1, retries until T2 and rebinds from T2 (at half
// the time left, at least 10 s apart); at expiry without an answer it logs
// it and marks the lease expired in the store, and tries on every minute.
func (d *Daemon) renewLoop(ctx context.Context, a *attachment, stop, done chan struct{}) {
	defer close(done)
	wait := func(until time.Time) bool {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(until)):
			return true
		}
	}
	for {
		a.mu.Lock()
		ack, _ := dhcpv4.FromBytes(a.rec.Ack)
		renewed, expired, rec := a.rec.Renewed, a.rec.State == lease.Expired, a.rec
		a.mu.Unlock()
		if ack == nil {
			return
		}
		t1, t2, expiry := timers(ack, renewed)
		now := time.Now()
		switch {
		case now.Before(t1):
			if !wait(t1) {
				return
			}
		case !now.Before(expiry):
			if !expired {
				d.log.Printf("lease %s of %s (netns %s) expired at %s without a renewal", rec.Address, rec.ClientID, rec.Netns, expiry.Format(time.RFC3339))
				a.mu.Lock()
				a.rec.State = lease.Expired
				rec = a.rec
				a.mu.Unlock()
				if err := d.withStore(func(st *store.Store) error { return lease.Records.In(st).Put(rec) }); err != nil {
					d.log.Printf("record the expiry of %s: %v", rec.ClientID, err)
				}
			}
			if !wait(now.Add(time.Minute)) {
				return
			}
			d.renewOnce(ctx, a)
		default:
			if d.renewOnce(ctx, a) {
				continue
			}
			end := t2
			if !now.Before(t2) {
				end = expiry
			}
			next := time.Now().Add(max(time.Until(end)/2, 10*time.Second))
			if next.After(expiry) {
				next = expiry
			}
			if !wait(next) {
				return
			}
		}
	}
}

// renewOnce sends one renewal (it retransmits for -resendtimeout) and
// records the answer; it reports whether the server acknowledged.
func (d *Daemon) renewOnce(ctx context.Context, a *attachment) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == nil || a.lease == nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, d.o.ResendTimeout)
	defer cancel()
	nl, err := a.client.Renew(rctx, a.lease, d.modifiers(&a.rec)...)
	if err != nil {
		var nak *nclient4.ErrNak
		if errors.As(err, &nak) {
			d.log.Printf("server %s refused to renew %s of %s (NAK)", a.rec.Server, a.rec.Address, a.rec.ClientID)
		} else {
			d.log.Printf("renew %s of %s: %v", a.rec.Address, a.rec.ClientID, err)
		}
		return false
	}
	a.lease = nl
	bind(&a.rec, nl.ACK, time.Now().UTC())
	rec := a.rec
	if err := d.withStore(func(st *store.Store) error { return lease.Records.In(st).Put(rec) }); err != nil {
		d.log.Printf("record the renewal of %s: %v", rec.ClientID, err)
	}
	d.log.Printf("renewed %s of %s until %s", rec.Address, rec.ClientID, rec.Expires.Format(time.RFC3339))
	return true
}
