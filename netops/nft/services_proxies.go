package nft

import (
	"fmt"

	"github.com/google/nftables"
)

// Which Service proxies the node runs, for `cnibox doctor`: the services
// table's size, and kube-proxy's tables as nftables sees them.

// ServicesFrontendCount is how many frontends the services tables hold
// (elements of service-ips4, service-ips6 and service-nodeports in the
// shards: one per address, protocol and port, a NodePort once for all
// its addresses and families); ok is false when there is no table. It
// reads the frontend maps only, not the chains: cheap at any size.
func (h *Handle) ServicesFrontendCount() (n int, ok bool, err error) {
	names, err := h.ServicesTablesIn()
	if err != nil || len(names) == 0 {
		return 0, false, err
	}
	for _, name := range names {
		for _, set := range []string{ServiceIPs4, ServiceIPs6, ServiceNodePorts} {
			has, err := h.nftSetExists(uint8(nftables.TableFamilyINet), name, set)
			if err != nil || !has {
				if err != nil {
					return 0, true, fmt.Errorf("read the services table %s in %s: %w", name, h.where(), err)
				}
				continue
			}
			es, err := h.dumpFamilyElems(nftables.TableFamilyINet, name, set)
			if err != nil {
				return 0, true, fmt.Errorf("read the services table %s in %s: %w", name, h.where(), err)
			}
			n += len(es)
		}
	}
	return n, true, nil
}

// KubeProxyTables names kube-proxy's Service tables in h's namespace:
// "ip kube-proxy" and "ip6 kube-proxy" (its nftables mode), "ip nat
// KUBE-SERVICES" and "ip6 nat KUBE-SERVICES" (its iptables mode through
// iptables-nft; iptables-legacy's tables are not nftables' and are not
// seen). None: kube-proxy does not serve Services here.
func (h *Handle) KubeProxyTables() ([]string, error) {
	if _, err := h.nftConn(); err != nil {
		return nil, err
	}
	var out []string
	for _, f := range []struct {
		fam  nftables.TableFamily
		name string
	}{{nftables.TableFamilyIPv4, "ip"}, {nftables.TableFamilyIPv6, "ip6"}} {
		ok, err := h.nftTableExists(uint8(f.fam), "kube-proxy")
		if err != nil {
			return nil, fmt.Errorf("look for kube-proxy's tables in %s: %w", h.where(), err)
		}
		if ok {
			out = append(out, f.name+" kube-proxy")
		}
		ch, err := h.nftGetChain(uint8(f.fam), "nat", "KUBE-SERVICES")
		if err != nil {
			return nil, fmt.Errorf("look for kube-proxy's chains in %s: %w", h.where(), err)
		}
		if ch != nil {
			out = append(out, f.name+" nat KUBE-SERVICES")
		}
	}
	return out, nil
}
