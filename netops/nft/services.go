package nft

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The services tables (issue 63): the data plane of the agent's Services
// proxy, what kube-proxy's nftables mode does, written from a
// svcmodel.Snapshot the agent's watcher resolved. One main table and
// svcShards shard tables, each Service's objects in the shard a hash of
// its namespace and name picks (shardOf):
//
//	table inet cnibox-services {                      # the main table: no jump to a Service
//		set hairpin4/6 (addr . addr), cluster-ips4/6, service-cidrs4/6 (interval)
//		chain filter-forward, filter-output, cluster-ips-check   # services_clusterips.go
//		chain postrouting { type nat hook postrouting priority srcnat
//			meta mark & M != 0 meta mark set meta mark & ~M masquerade
//			ct status dnat ip saddr . ip daddr @hairpin4 masquerade    # a pod to its own Service
//			...
//		}
//	}
//	table inet cnibox-services-00 .. cnibox-services-0f {   # the shards
//		map service-ips4 { type ipv4_addr . inet_proto . inet_service : verdict }  # ClusterIP, externalIP, LB
//		map service-ips6 { type ipv6_addr . inet_proto . inet_service : verdict }
//		map service-nodeports { type inet_proto . inet_service : verdict }        # -> np-<proto>-<port>
//		set nodeport-addrs4/6, cluster-cidrs4/6 (interval)   # the same in every shard
//		chain prerouting { type nat hook prerouting priority dstnat; jump services }
//		chain output { type nat hook output priority dstnat; jump services }
//		chain services {
//			ip daddr . meta l4proto . th dport vmap @service-ips4
//			ip6 daddr . meta l4proto . th dport vmap @service-ips6
//			ip daddr @nodeport-addrs4 meta l4proto . th dport vmap @service-nodeports
//			ip6 daddr @nodeport-addrs6 meta l4proto . th dport vmap @service-nodeports
//		}
//		# per ServicePort (one port of one Service in one family), ID a hash of it:
//		chain svc-ID { [ip saddr != @cluster-cidrs4 meta mark set mark | M]; <endpoints> }   # internal traffic
//		chain ext-ID { ... }     # external traffic (NodePort, externalIP, LB), its policy
//		chain lb-ID { ip saddr != @src-ID drop; goto ext-ID }  # loadBalancerSourceRanges
//		chain epc-ID { <cluster endpoints> }  # only when both policies are Local
//		map slots4-000 .. slots4-00f { type integer . integer . integer : ipv4_addr . inet_service }  # table ID . slot -> endpoint
//		map af-c-ID, af-l-ID { ... flags dynamic,timeout }  # sessionAffinity ClientIP
//	}
//
// Why shards: a transaction that adds a jump or goto (a chain's rule, an
// element of a verdict map) makes the kernel validate the whole table it
// is in, from its base chains through every verdict map's elements and
// their chains (nf_tables_validate, per table): at 30,000 Services in
// one table that was 184 ms (p50) for a Service created, the same change
// in a table of 1/16th the size a few ms. A packet's first one meets the
// shards' nat chains one after the other (the first DNAT ends the walk:
// nf_nat runs a hook's further nat chains only while the connection has
// no binding), so a connection to no Service pays svcShards lookups of
// each map, on its first packet only. A frontend claimed by ServicePorts
// of two shards (two Services with one externalIP and port) is written
// in the first claim's shard only, as one table wrote the first claim's;
// a NodePort likewise, with the claims of that shard.
//
// <endpoints> is one of: `dnat to E` (one endpoint), `dnat to jhash ip
// saddr . th sport mod M` then a lookup of the ServicePort's slot table
// ID . that slot in service-slots4/6 (several: services_maglev.go),
// with session affinity a lookup of the client in af-x-ID first and an
// update of it after; none: `reject` (TCP reset, else ICMP port
// unreachable) when the Service has no endpoint at all, `drop` when it
// has some but none for this traffic (a Local policy on a node without
// one). Masquerade is marked where kube-proxy marks it: traffic to a
// ClusterIP from outside the cluster's pod networks, external traffic of
// a Cluster policy, the node's own traffic to an external frontend of a
// Local policy; the hairpin set masquerades a pod that its Service sent
// to itself. The chains are nat chains: they see a connection's first
// packet, and conntrack carries the rest.
//
// Apply writes the difference from the snapshot it applied last without
// reading the kernel (a change of one Service is that Service's chains,
// sets and map elements, in its shard); Resync dumps the tables and
// reconciles them on the core (core.go), which repairs what someone
// changed, and removes shard tables of another count; Apply resyncs
// when it has no last snapshot or its transaction fails.
const (
	// ServicesTable is the main services table's name (family inet).
	ServicesTable = "cnibox-services"
	// ServicesShardPrefix begins the shard tables' names (family inet):
	// cnibox-services-00 .. cnibox-services-0f (ServicesTables).
	ServicesShardPrefix = ServicesTable + "-"
	// The frontend maps.
	ServiceIPs4       = "service-ips4"
	ServiceIPs6       = "service-ips6"
	ServiceNodePorts  = "service-nodeports"
	svcNodePortAddrs4 = "nodeport-addrs4"
	svcNodePortAddrs6 = "nodeport-addrs6"
	svcClusterCIDRs4  = "cluster-cidrs4"
	svcClusterCIDRs6  = "cluster-cidrs6"
	svcHairpin4       = "hairpin4"
	svcHairpin6       = "hairpin6"
	svcSlots4         = "slots4-"
	svcSlots6         = "slots6-"
	// svcShards is how many shard tables hold the Services (see above):
	// at 30,000 Services a shard holds ~1,900, whose validation is what
	// a Service created costs.
	svcShards = 16
	// svcSlotShards is how many slot maps a family has, over all shard
	// tables (svcSlotShards/svcShards in each). A data map's
	// every element is checked against every rule that looks it up, and
	// each rule's binding walks it and the map's other bindings (the
	// kernel's loop checks): one map for all ServicePorts is quadratic
	// (5,000 Services x 4 endpoints: 29 s), a map each makes thousands of
	// sets, which the kernel finds by name in a list. Shards of a few
	// hundred ServicePorts keep both small.
	svcSlotShards = 256
	// svcSlotMaps is how many slot maps of a family a shard table has.
	svcSlotMaps      = svcSlotShards / svcShards
	svcChainServices = "services"
	svcLabel         = "cnibox services"

	// DefaultMasqMark is ServicesOptions.MasqMark's default, kube-proxy's
	// (--masquerade-bit 14).
	DefaultMasqMark = 1 << 14
)

// ServicesOptions is what the services table needs that is not per
// snapshot.
type ServicesOptions struct {
	// MasqMark is the packet mark bit that asks postrouting to
	// masquerade; 0 is DefaultMasqMark.
	MasqMark uint32
	// ClearConntrack, when set, is called after a transaction that
	// removed endpoints of UDP (or SCTP) Service ports, with those
	// endpoints: their conntrack entries should be deleted (netops'
	// DeleteConntrackTo), or the clients keep sending to them (a dead
	// CoreDNS) until the entries time out. Its error is Apply's, after
	// the table was written.
	ClearConntrack func(gone []netip.AddrPort) error
}

// Services is the services table on one Handle's namespace, with what it
// last applied. It is not safe for concurrent use.
type Services struct {
	h    *Handle
	opts ServicesOptions
	// st is what the table holds as the last Apply or Resync wrote it;
	// nil when unknown (never written, or a transaction failed).
	st *svcState
	// touched, while a check is under way (services_check.go), names
	// what Apply wrote since it began.
	touched map[string]struct{}
}

// NewServices returns the services table of h's namespace; nothing is
// written until Apply or Resync.
func NewServices(h *Handle, opts ServicesOptions) *Services {
	if opts.MasqMark == 0 {
		opts.MasqMark = DefaultMasqMark
	}
	return &Services{h: h, opts: opts}
}

// Apply makes the table hold snap, writing only what differs from the
// snapshot applied last (one transaction, no dump). With nothing applied
// yet, or when its transaction fails (the table changed under it), it
// resyncs (Resync). The snapshot must not change afterwards.
func (s *Services) Apply(snap *svcmodel.Snapshot) error {
	if s.st == nil {
		return s.Resync(snap)
	}
	defer s.quiet()()
	if err := s.h.bigBatchesOpen(); err != nil {
		return fmt.Errorf("apply services in %s: %w", s.h.where(), err)
	}
	next, gone, err := s.applyDiff(snap)
	if err != nil {
		s.st = nil
		if rerr := s.Resync(snap); rerr != nil {
			return errors.Join(fmt.Errorf("apply services in %s: %w", s.h.where(), classify(err)), rerr)
		}
		return nil
	}
	s.st = next
	return s.clear(gone)
}

// Resync dumps the tables and makes them hold snap, repairing whatever
// differs (a deleted element, a flushed chain, the table gone); when
// nothing differs nothing is sent.
func (s *Services) Resync(snap *svcmodel.Snapshot) error {
	_, err := s.resync(snap)
	return err
}

// resync is Resync; it also reports whether the kernel's tables had to
// change.
func (s *Services) resync(snap *svcmodel.Snapshot) (changed bool, err error) {
	var old *svcState
	old, s.st = s.st, nil
	st := s.render(snap)
	defer s.quiet()()
	if err := s.h.bigBatchesOpen(); err != nil {
		return false, fmt.Errorf("resync services in %s: %w", s.h.where(), err)
	}
	changed, err = s.h.reconcile(st.specs(s)...)
	if err != nil {
		return false, fmt.Errorf("resync services in %s: %w", s.h.where(), classify(err))
	}
	dropped, err := s.dropStale()
	if err != nil {
		return false, fmt.Errorf("resync services in %s: %w", s.h.where(), classify(err))
	}
	s.st = st
	if old == nil {
		return changed || dropped, nil
	}
	return changed || dropped, s.clear(old.goneUDP(st))
}

// Delete removes the tables (the main table and every shard); missing
// ones are no error.
func (s *Services) Delete() error {
	s.st = nil
	if err := s.h.deleteServicesTables(); err != nil {
		return fmt.Errorf("delete the services tables in %s: %w", s.h.where(), classify(err))
	}
	return nil
}

// dropStale deletes shard tables of another count of shards (an agent
// of another build wrote them).
func (s *Services) dropStale() (dropped bool, err error) {
	stale, err := s.h.staleShards()
	if err != nil || len(stale) == 0 {
		return false, err
	}
	t := s.h.tx()
	for _, tb := range stale {
		dropTable(t.conn(), tb)
	}
	return true, t.commit()
}

// quiet makes the Handle's transactions quiet (txn_quiet.go) until the
// function it returns is called: a first sync is hundreds of thousands
// of messages.
func (s *Services) quiet() func() {
	s.h.quiet = svcTable()
	return func() { s.h.quiet = nil }
}

// clear hands the UDP endpoints that left to ClearConntrack.
func (s *Services) clear(gone []netip.AddrPort) error {
	if len(gone) == 0 || s.opts.ClearConntrack == nil {
		return nil
	}
	if err := s.opts.ClearConntrack(gone); err != nil {
		return fmt.Errorf("services: clear the conntrack entries of endpoints that left (%v): %w", gone, err)
	}
	return nil
}

// bigBatchesOpen opens the connection and raises its buffers: a first
// sync of a large cluster is one batch (as the policy table's).
func (h *Handle) bigBatchesOpen() error {
	if _, err := h.nftConn(); err != nil {
		return err
	}
	return h.bigBatches()
}

func svcTable() *nftables.Table {
	return &nftables.Table{Name: ServicesTable, Family: nftables.TableFamilyINet}
}
