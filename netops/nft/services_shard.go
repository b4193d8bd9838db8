package nft

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// The services tables' shards (services.go says why): which shard holds
// a Service, the shards' names, and the tables of a namespace that are
// the proxy's.

// shardOf is the shard of Service sn: FNV-1a of "namespace/name" mod
// svcShards. A Service's ServicePorts (its ports, both families) are in
// one shard, so that a NodePort's chain reaches both families' external
// chains.
func shardOf(sn svcmodel.ServiceName) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sn.Namespace + "/" + sn.Name))
	return int(h.Sum32() % svcShards)
}

// shardOfKey is the shard of a ServicePort.
func shardOfKey(k spk) int { return shardOf(svcOf(k)) }

// shardName is shard i's table name: cnibox-services-%02x.
func shardName(i int) string { return fmt.Sprintf("%s%02x", ServicesShardPrefix, i) }

func svcShardTable(i int) *nftables.Table {
	return &nftables.Table{Name: shardName(i), Family: nftables.TableFamilyINet}
}

// ServicesTables are the tables (family inet) a services proxy writes:
// the main table, then the shards.
func ServicesTables() []string {
	out := []string{ServicesTable}
	for i := range svcShards {
		out = append(out, shardName(i))
	}
	return out
}

// ServicesShardOf is the shard table that holds Service
// namespace/name's frontends (its elements of service-ips4/6 and
// service-nodeports).
func ServicesShardOf(namespace, name string) string {
	return shardName(shardOf(svcmodel.ServiceName{Namespace: namespace, Name: name}))
}

// isServicesTable reports whether an inet table of this name is the
// proxy's: the main table or a shard of any count.
func isServicesTable(name string) bool {
	return name == ServicesTable || strings.HasPrefix(name, ServicesShardPrefix)
}

// ServicesTablesIn lists the proxy's tables in h's namespace (the main
// table first, then the shards by name), whatever count of shards wrote
// them; none when there are none.
func (h *Handle) ServicesTablesIn() ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	tbs, err := consistently(h, func() ([]*nftables.Table, error) { return h.nft.ListTablesOfFamily(nftables.TableFamilyINet) })
	if err != nil {
		return nil, fmt.Errorf("list the tables in %s: %w", h.where(), err)
	}
	var out []string
	for _, tb := range tbs {
		if isServicesTable(tb.Name) {
			out = append(out, tb.Name)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case a == ServicesTable:
			return -1
		case b == ServicesTable:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out, nil
}

// staleShards are the proxy's tables in h's namespace that are no
// table of this count of shards (a shard count changed).
func (h *Handle) staleShards() ([]*nftables.Table, error) {
	names, err := h.ServicesTablesIn()
	if err != nil {
		return nil, err
	}
	keep := ServicesTables()
	var out []*nftables.Table
	for _, n := range names {
		if !slices.Contains(keep, n) {
			out = append(out, &nftables.Table{Name: n, Family: nftables.TableFamilyINet})
		}
	}
	return out, nil
}

// deleteServicesTables deletes every table of the proxy's in h's
// namespace, in one transaction; none is no error.
func (h *Handle) deleteServicesTables() error {
	names, err := h.ServicesTablesIn()
	if err != nil || len(names) == 0 {
		return err
	}
	t := h.tx()
	for _, n := range names {
		dropTable(t.conn(), &nftables.Table{Name: n, Family: nftables.TableFamilyINet})
	}
	return t.commit()
}
