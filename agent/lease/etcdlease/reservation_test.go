package etcdlease

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/agent/lease"
)

// TestReservation: a subnet key written without a TTL (flannel's
// documented reservations: `etcdctl put <prefix>/subnets/10.244.7.0-24
// '{"PublicIP":"192.0.2.1"}'`) is this node's lease when the public IP is
// its own; the agent publishes its attributes into it and keeps it
// without an etcd lease (flanneld updates it with TTL 0), renewal included.
// A deleted reservation is a lease gone.
func TestReservation(t *testing.T) {
	url := startEtcd(t)
	cli := client(t, url)
	ctx := ctxT(t)
	if _, err := cli.Put(ctx, "/r/config", `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`); err != nil {
		t.Fatal(err)
	}
	const key = "/r/subnets/10.244.7.0-24"
	if _, err := cli.Put(ctx, key, `{"PublicIP":"192.0.2.1"}`); err != nil {
		t.Fatal(err)
	}
	m := newManagerAt(t, url, "/r")
	cfg, err := m.NetworkConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: get %s = %v, %v", stage, key, resp, err)
		}
		kv := resp.Kvs[0]
		if kv.Lease != 0 {
			t.Errorf("%s: the reservation got etcd lease %x (a TTL); want none", stage, kv.Lease)
		}
		if !strings.Contains(string(kv.Value), attrs(1).VTEPMAC.String()) {
			t.Errorf("%s: value %s lacks the node's VTEP MAC", stage, kv.Value)
		}
	}
	l, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(1), Previous: netip.MustParsePrefix("10.244.9.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	if l.Subnet != netip.MustParsePrefix("10.244.7.0/24") || !l.Expiration.IsZero() {
		t.Fatalf("Acquire = %v expiring %v; want the reserved 10.244.7.0/24 without expiry", l.Subnet, l.Expiration)
	}
	check("after Acquire")
	if l, err = m.Renew(ctx, l); err != nil || !l.Expiration.IsZero() {
		t.Fatalf("Renew of a reservation = %v, %v", l.Expiration, err)
	}
	check("after Renew")
	// A second Acquire (the agent's restart) keeps it a reservation too.
	m2 := newManagerAt(t, url, "/r")
	if l2, err := m2.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(1)}); err != nil || l2.Subnet != l.Subnet {
		t.Fatalf("Acquire after a restart = %v, %v", l2.Subnet, err)
	}
	check("after a restart")

	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Renew(ctx, l); !errors.Is(err, lease.ErrLeaseGone) {
		t.Fatalf("Renew of a deleted reservation = %v, want ErrLeaseGone", err)
	}
	// A lease it takes afterwards is an ordinary one, with a TTL.
	l3, err := m.Acquire(ctx, lease.AcquireRequest{Config: cfg, Attrs: attrs(1)})
	if err != nil || l3.Expiration.IsZero() {
		t.Fatalf("Acquire after the reservation went = %v, %v; want a lease with a TTL", l3, err)
	}
}
