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
	proxy bool
	// only is --service-proxy-only: the proxy alone, without the
	// overlay (a node whose pod network is another CNI's); it turns
	// proxy on.
	only bool
	// cleanupKubeProxy removes kube-proxy's leftovers after each full
	// sync of the proxy (nft.CleanupKubeProxy).
	cleanupKubeProxy  bool
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
	// procSys is where those are written: /proc/sys, or the chart's
	// mount of the host's /proc/sys/net (a container's is read-only).
	procSys string
}

func (s *serviceFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.proxy, "service-proxy", false, "kube: serve Services (ClusterIP, NodePort, externalIPs, LoadBalancer IPs) from the nftables tables cnibox-services and cnibox-services-00..0f "+
		"instead of kube-proxy, from the cluster's Services and EndpointSlices (docs/services.md) (cnibox)")
	fs.BoolVar(&s.only, "service-proxy-only", false, "kube: serve only the Services proxy (--service-proxy without lease, overlay or pod API): "+
		"a node whose pod network is another CNI's; needs --kubeconfig-file (or --kube-api-url) or in-cluster config, and --cluster-cidr (docs/services.md) (cnibox)")
	fs.BoolVar(&s.cleanupKubeProxy, "cleanup-kube-proxy", false, "kube, with --service-proxy: once the proxy has written its table, and after each full resync, "+
		"remove what kube-proxy left on the node as `kube-proxy --cleanup` does (tables ip/ip6 kube-proxy, its iptables-nft KUBE-* chains): "+
		"moving a node off kube-proxy, whose DaemonSet is gone (docs/deploy.md) (cnibox)")
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
	fs.StringVar(&s.procSys, "proc-sys-dir", "/proc/sys", "kube, with --service-proxy: the procfs sys directory the conntrack timeouts are written through: "+
		"a container's /proc/sys is read-only, so the chart mounts the host's /proc/sys/net at /host/proc/sys/net and passes /host/proc/sys "+
		"(its net entries are the agent's namespace's, the node's) (cnibox)")
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

// validateProxyMode checks how the proxy runs beside the agent's other
// features: --service-proxy-only turns --service-proxy on and needs a
// way to the API server (getenv: in-cluster config's variables);
// --service-proxy without the Kubernetes subnet manager or another
// "-only" mode would run the overlay on etcd, so it asks for etcd to be
// named (or for --service-proxy-only); --cleanup-kube-proxy needs the
// proxy.
func (f *flags) validateProxyMode(getenv func(string) string) error {
	s := &f.svc
	if s.only {
		if f.set["service-proxy"] && !s.proxy {
			return fmt.Errorf("--service-proxy-only with --service-proxy=false: the first serves Services, the second does not: drop one")
		}
		if f.kubeSubnetMgr {
			return fmt.Errorf("--service-proxy-only with --kube-subnet-mgr: -only serves Services without the overlay: for both, use --service-proxy with --kube-subnet-mgr")
		}
		if f.kubeconfig == "" && f.kubeAPIURL == "" && (getenv("KUBERNETES_SERVICE_HOST") == "" || getenv("KUBERNETES_SERVICE_PORT") == "") {
			return fmt.Errorf("--service-proxy-only: no API server to read Services from: give --kubeconfig-file PATH (or --kube-api-url URL), " +
				"or run the agent in a pod, where in-cluster config reads $KUBERNETES_SERVICE_HOST, $KUBERNETES_SERVICE_PORT and the service account's token")
		}
		if len(s.cidrs) == 0 {
			return fmt.Errorf("--service-proxy-only: the pods' networks are unknown without the overlay: give --cluster-cidr, the pod CIDRs of the cluster's CNI, e.g. 10.244.0.0/16,fd00:10:244::/56 (traffic to a Service from elsewhere is masqueraded)")
		}
		s.proxy = true
	}
	if s.cleanupKubeProxy && !s.proxy {
		return fmt.Errorf("--cleanup-kube-proxy without --service-proxy: kube-proxy's rules are removed only where cnibox's proxy serves the Services instead: add --service-proxy (or run `cnibox cleanup kube-proxy` once kube-proxy is gone)")
	}
	if s.proxy && !s.only && !f.kubeSubnetMgr && !f.pod.only && !f.ipam.only && !f.set["etcd-endpoints"] {
		return fmt.Errorf("--service-proxy without --kube-subnet-mgr runs the overlay on etcd at the default --etcd-endpoints %s: "+
			"for the Services proxy alone (the pods' network is another CNI's), use --service-proxy-only; for the overlay on etcd, give --etcd-endpoints", f.etcdEndpoints)
	}
	return nil
}
