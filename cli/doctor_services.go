package cli

import (
	"strings"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// checkServices reports the node's Service proxy: cnibox-agent's
// services table with its frontends; a failure when kube-proxy's tables
// serve Services here too (two proxies DNAT the same connections, the
// first hook wins, and each one's changes show up or not by chance);
// nothing when neither is there (kube-proxy with iptables-legacy is not
// seen: its tables are not nftables').
func (d *doctor) checkServices(host *netops.Handle) {
	h := host.NFT()
	n, ok, err := h.ServicesFrontendCount()
	if err != nil {
		d.warn("services", "", "cannot read the services table: %v", err)
		return
	}
	if !ok {
		return
	}
	kp, err := h.KubeProxyTables()
	if err != nil {
		d.warn("services", "", "cannot look for kube-proxy's tables: %v", err)
		return
	}
	if len(kp) > 0 {
		d.fail("services", d.nodeFix("run one proxy (docs/deploy.md#from-kube-proxy-to-cnibox-and-back): to keep cnibox's, remove kube-proxy's DaemonSet "+
			"(or nodeSelector it off this node), then run `cnibox cleanup kube-proxy` here (it removes "+strings.Join(kp, ", ")+" and the rest of kube-proxy's rules, "+
			"as `kube-proxy --cleanup` does; cnibox-agent --cleanup-kube-proxy, the chart's serviceProxy.cleanupKubeProxy, does it at each full sync); "+
			"to keep kube-proxy, set cnibox-agent --service-proxy=false (the chart's serviceProxy.enabled=false), which removes table inet "+nft.ServicesTable+
			" (or `cnibox cleanup services` where no agent runs the proxy); established connections keep flowing either way"),
			"two Service proxies on this node: kube-proxy's %s and cnibox-agent's table inet %s (%d frontends)", strings.Join(kp, ", "), nft.ServicesTable, n)
		return
	}
	d.pass("services", "cnibox-agent --service-proxy serves %d frontends (table inet %s and its shards %s*; `cnibox inspect services` lists them); no kube-proxy table", n, nft.ServicesTable, nft.ServicesShardPrefix)
}
