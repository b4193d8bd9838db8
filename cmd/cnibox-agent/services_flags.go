package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// serviceFlags configure the Services proxy (agent/services,
// docs/services.md).
type serviceFlags struct {
	proxy             bool
	nodePortAddresses string
	resync            time.Duration
	// clusterCIDR is --cluster-cidr; cidrs, what validate read of it.
	clusterCIDR string
	cidrs       []netip.Prefix
	// healthzAddr and metricsAddr are kube-proxy's ports, served with
	// --service-proxy ("" : not served).
	healthzAddr, metricsAddr string
	// ctEstablished and ctCloseWait are kube-proxy's conntrack TCP
	// timeouts, written in the node's namespace (0: left alone).
	ctEstablished, ctCloseWait time.Duration
}

func (s *serviceFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.proxy, "service-proxy", false, "kube: serve Services (ClusterIP, NodePort, externalIPs, LoadBalancer IPs) from the nftables table cnibox-services "+
		"instead of kube-proxy, from the cluster's Services and EndpointSlices (docs/services.md) (cnibox)")
	fs.StringVar(&s.nodePortAddresses, "nodeport-addresses", "primary", "kube, with --service-proxy: the node's addresses that serve NodePorts, as kube-proxy's flag: "+
		"\"primary\" (the node's primary IPs, kube-proxy's nftables default) or comma-separated CIDRs (a family no CIDR names is served on all its addresses; "+
		"0.0.0.0/0,::/0: every address) (cnibox)")
	fs.DurationVar(&s.resync, "service-resync", 60*time.Second, "kube, with --service-proxy: how often the whole services table is compared with the Services and repaired (kube-proxy's --sync-period) (cnibox)")
	fs.StringVar(&s.healthzAddr, "proxy-healthz-addr", "0.0.0.0:10256", "kube, with --service-proxy: where kube-proxy's /healthz and /livez are served "+
		"(kube-proxy's --healthz-bind-address: load balancers' health checks and tools ask there); \"\": not served (cnibox)")
	fs.StringVar(&s.metricsAddr, "proxy-metrics-addr", "127.0.0.1:10249", "kube, with --service-proxy: where kube-proxy's /metrics and /proxyMode are served "+
		"(kube-proxy's --metrics-bind-address); \"\": not served (cnibox)")
	fs.DurationVar(&s.ctEstablished, "conntrack-tcp-timeout-established", 24*time.Hour, "kube, with --service-proxy: the node's "+
		"net.netfilter.nf_conntrack_tcp_timeout_established, as kube-proxy's flag of that name sets it; 0: left alone (cnibox)")
	fs.DurationVar(&s.ctCloseWait, "conntrack-tcp-timeout-close-wait", time.Hour, "kube, with --service-proxy: the node's "+
		"net.netfilter.nf_conntrack_tcp_timeout_close_wait, as kube-proxy's flag of that name sets it; 0: left alone (cnibox)")
	fs.StringVar(&s.clusterCIDR, "cluster-cidr", "", "kube, with --service-proxy: the pods' networks, comma-separated CIDRs (traffic to a Service from elsewhere is masqueraded, as kube-proxy's --cluster-cidr); "+
		"default: net-conf.json's Network and IPv6Network with --kube-subnet-mgr (cnibox)")
}

// validate checks the proxy's flags.
func (s *serviceFlags) validate() error {
	if s.ctEstablished < 0 || s.ctCloseWait < 0 {
		return fmt.Errorf("--conntrack-tcp-timeout-established %s, --conntrack-tcp-timeout-close-wait %s: use 0 (leave the node's) or a positive duration, e.g. 24h and 1h", s.ctEstablished, s.ctCloseWait)
	}
	if s.resync <= 0 {
		return fmt.Errorf("--service-resync %s: use a period of at least 1s, e.g. 60s", s.resync)
	}
	s.cidrs = nil
	for _, c := range strings.Split(s.clusterCIDR, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--cluster-cidr %q: %q is not a CIDR: list the pods' networks, comma separated, e.g. 10.244.0.0/16,fd00:10:244::/56", s.clusterCIDR, c)
		}
		s.cidrs = append(s.cidrs, p.Masked())
	}
	return validateNodePortAddresses(s.nodePortAddresses)
}
