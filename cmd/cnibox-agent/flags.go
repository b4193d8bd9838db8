package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/lease/etcdlease"
	"github.com/cnibox/cnibox/agent/podapi"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// flags are flanneld v0.28.9's, every one with its name, default and
// meaning (docs/overlay.md has the table), so that operators' unit files,
// DaemonSets and FLANNELD_* environments carry over, plus a few of
// cnibox's own (their usage ends in "(cnibox)").
type flags struct {
	// kube is what the Kubernetes build's features share once started
	// (kube.go: the informer cache); not a flag.
	kube kubeState

	etcdEndpoints string
	etcdPrefix    string
	etcdKeyfile   string
	etcdCertfile  string
	etcdCAFile    string
	etcdUsername  string
	etcdPassword  string
	// etcdPasswordFile holds the password (secrets.go).
	etcdPasswordFile string
	leaseTTL         time.Duration

	kubeSubnetMgr        bool
	kubeconfig           string
	kubeAPIURL           string
	kubeAnnotationPrefix string
	netConfPath          string
	nodeName             string
	// iface and ifaceRegex may be given several times: each is tried in
	// order, names and addresses first, then the expressions.
	iface         listFlag
	ifaceRegex    listFlag
	ifaceCanReach string
	publicIP      string
	publicIPv6    string
	subnetFile    string
	ipMasq        bool
	// ipMasqFullyRandomDisable turns the masquerade's fully-random port
	// choice off.
	ipMasqFullyRandomDisable bool
	renewMargin              int
	healthzIP                string
	healthzPort              int
	// iptablesResync is how often, in seconds, the masquerade and forward
	// rules (and the blackhole route) are checked and restored.
	iptablesResync int
	// policyResync is how often, in seconds, the policy table is replaced
	// whole with the model (0: never).
	policyResync int
	// The flow log (docs/flowlog.md): the verdicts logged everywhere, the
	// file ("" turns the flow log off, annotations too), its rotation and
	// its rate.
	flowLog, flowLogFile                         string
	flowLogMaxSize, flowLogMaxFiles, flowLogRate int
	iptablesForwardRules                         bool
	blackholeRoute                               bool
	// The fast path (agent/fastpath.go): on, and after how many packets a
	// connection is offloaded.
	fastPath                  bool
	fastPathPackets           int
	setNodeNetworkUnavailable bool
	// klog's flags that flanneld copies: -v sets the verbosity (>= 1 logs
	// at debug level); -vmodule and -log_backtrace_at are accepted.
	verbosity      int
	vmodule        string
	logBacktraceAt string

	dataDir        string
	txChecksumOff  bool
	resyncInterval time.Duration
	logLevel       string
	healthAddr     string
	showVersion    bool
	pod            podAPIFlags // podapi_flags.go
	// networkPolicy enforces NetworkPolicies (kube: with
	// --kube-subnet-mgr); clusterNetworkPolicies adds the
	// ClusterNetworkPolicies (their CRD must be installed).
	networkPolicy          bool
	clusterNetworkPolicies bool
	// multiNetworkPolicies enforces MultiNetworkPolicies on the secondary
	// networks (agent/mnp; with the pod API).
	multiNetworkPolicies bool
	// dnsProxyPort is the DNS proxy's port (domainNames peers, with
	// clusterNetworkPolicies; 0: none).
	dnsProxyPort int
	// dnsService ("<namespace>/<name>") and dnsTrusted (addresses, comma
	// separated) are the resolvers whose answers the DNS proxy learns
	// from (agent/policy/resolvers.go); dnsResolvers is dnsTrusted parsed.
	dnsService, dnsTrusted string
	dnsResolvers           []netip.Addr
	ipam                   clusterIPAMFlags // clusteripam.go
	svc                    serviceFlags     // services_flags.go
	lb                     lbIPAMFlags      // lbipam_flags.go

	// set holds the names of the flags given on the command line or by
	// FLANNELD_<FLAG>.
	set map[string]bool
}

// listFlag is a flag that may be given several times (flanneld's
// flagSlice): each value is appended.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set appends v.
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// stringFlag is one string flag: where it goes, its name, default and usage.
type stringFlag struct {
	p                *string
	name, def, usage string
}

// stringFlags are most of the flags.
func (f *flags) stringFlags() []stringFlag {
	return []stringFlag{
		{&f.etcdEndpoints, "etcd-endpoints", "http://127.0.0.1:4001,http://127.0.0.1:2379", "a comma-delimited list of etcd endpoints"},
		{&f.etcdPrefix, "etcd-prefix", etcdlease.DefaultPrefix, "etcd prefix"},
		{&f.etcdKeyfile, "etcd-keyfile", "", "SSL key file used to secure etcd communication"},
		{&f.etcdCertfile, "etcd-certfile", "", "SSL certification file used to secure etcd communication"},
		{&f.etcdCAFile, "etcd-cafile", "", "SSL Certificate Authority file used to secure etcd communication"},
		{&f.etcdUsername, "etcd-username", "", "username for BasicAuth to etcd"},
		{&f.etcdPassword, "etcd-password", "", "password for BasicAuth to etcd (visible in the process list: prefer --etcd-password-file or $CNIBOX_ETCD_PASSWORD)"},
		{&f.etcdPasswordFile, "etcd-password-file", "", "file holding the password for BasicAuth to etcd (cnibox)"},
		{&f.kubeconfig, "kubeconfig-file", "", "kubeconfig file location. Does not need to be specified if running in a pod."},
		{&f.kubeAPIURL, "kube-api-url", "", "Kubernetes API server URL. Does not need to be specified if running in a pod."},
		{&f.kubeAnnotationPrefix, "kube-annotation-prefix", "flannel.alpha.coreos.com", `Kubernetes annotation prefix. Can contain single slash "/", otherwise it will be appended at the end.`},
		{&f.netConfPath, "net-config-path", "/etc/kube-flannel/net-conf.json", "path to the network configuration file"},
		{&f.nodeName, "node-name", "", "kube: this node's name (default $NODE_NAME, else the nodeName of the pod $POD_NAMESPACE/$POD_NAME, else the hostname) (cnibox)"},
		{&f.ifaceCanReach, "iface-can-reach", "", "detect the interface to use for inter-host communication as the one the route to this IP goes through ('ip route get <ip-address>')"},
		{&f.publicIP, "public-ip", "", "IP accessible by other nodes for inter-host communication (alone, it also picks the interface that holds it)"},
		{&f.publicIPv6, "public-ipv6", "", "IPv6 accessible by other nodes for inter-host communication"},
		{&f.subnetFile, "subnet-file", agent.DefaultSubnetFile, "filename where env variables (subnet, MTU, ... ) will be written to"},
		{&f.healthzIP, "healthz-ip", "0.0.0.0", "the IP address for healthz server to listen"},
		{&f.vmodule, "vmodule", "", "klog's per-file verbosity (accepted; cnibox logs by level)"},
		{&f.flowLog, "flow-log", "", "kube: log these policy verdicts of every connection: allow, deny or allow,deny (namespaces annotated cnibox.io/flow-log are logged whatever this says) (cnibox)"},
		{&f.flowLogFile, "flow-log-file", flowlog.DefaultPath, "kube: the flow log; empty turns the flow log off, the namespaces' annotations too (cnibox)"},
		{&f.logBacktraceAt, "log_backtrace_at", "", "klog's file:line backtrace trigger (accepted; cnibox prints none)"},
		{&f.dataDir, "data-dir", "", "cnibox store directory (default $CNIBOX_DATA_DIR or " + store.DefaultDir + ") (cnibox)"},
		{&f.logLevel, "log-level", "info", "debug, info, warn or error (cnibox)"},
		{&f.dnsService, "dns-service", "kube-system/kube-dns", "kube, with --dns-proxy-port: the cluster DNS Service (<namespace>/<name>) whose cluster IPs and endpoints are trusted resolvers: domainNames peers learn only from their answers, and pods' DNS to other servers is not proxied (empty: only --dns-trusted-resolvers) (cnibox)"},
		{&f.dnsTrusted, "dns-trusted-resolvers", "", "kube, with --dns-proxy-port: more trusted resolvers beside --dns-service's, comma-separated addresses (e.g. NodeLocal DNSCache's 169.254.20.10) (cnibox)"},
		{&f.healthAddr, "health-addr", "", "serve /healthz (running), /readyz (lease held, device up) and /metrics (Prometheus) on this address, e.g. 127.0.0.1:9666 (cnibox)"},
	}
}

// boolFlag is one bool flag.
type boolFlag struct {
	p     *bool
	name  string
	def   bool
	usage string
}

func (f *flags) boolFlags() []boolFlag {
	return []boolFlag{
		{&f.kubeSubnetMgr, "kube-subnet-mgr", false, "contact the Kubernetes API for subnet assignment instead of etcd."},
		{&f.ipMasq, "ip-masq", false, "setup IP masquerade rule for traffic destined outside of overlay network"},
		{&f.ipMasqFullyRandomDisable, "ip-masq-fully-random-disable", false, "disable fully-random mode for MASQUERADE"},
		{&f.iptablesForwardRules, "iptables-forward-rules", true, "accept the cluster network in the node's forward path (iptables' filter FORWARD when it exists)"},
		{&f.blackholeRoute, "ip-blackhole-route", false, "add a blackhole route on the node for the local podCIDR"},
		{&f.fastPath, "fast-path", true, "forward the pods' established routed connections from an nftables flowtable (the pods' bridge, the backend's device, the interface), after --fast-path-packets packets; a policy change takes every connection out of it; false removes the table (cnibox)"},
		{&f.setNodeNetworkUnavailable, "set-node-network-unavailable", true, "kube: set the node's NetworkUnavailable condition to False once the lease and the device are up"},
		{&f.txChecksumOff, "vxlan-tx-checksum-off", false, "turn tx checksum offload off on the VXLAN device (kernel bug with NATed VXLAN) (cnibox)"},
		{&f.showVersion, "version", false, "print version and exit"},
		{&f.networkPolicy, "network-policy", true, "kube: enforce NetworkPolicies in the node's nftables table cnibox-policy (with --kube-subnet-mgr); false removes the table (cnibox)"},
		{&f.clusterNetworkPolicies, "cluster-network-policies", false, "kube: enforce ClusterNetworkPolicies too (policy.networking.k8s.io v1beta1, or v1alpha2 where the API serves only it; their CRD must be installed) (cnibox)"},
		{&f.multiNetworkPolicies, "multi-network-policies", false, "kube: enforce MultiNetworkPolicies (k8s.cni.cncf.io v1beta1, their CRD installed) on the secondary networks, in each pod's network namespace (needs --pod-api, and CAP_SYS_ADMIN to enter the pods' namespaces) (cnibox)"},
	}
}

func (f *flags) intFlags() []struct {
	p     *int
	name  string
	def   int
	usage string
} {
	return []struct {
		p     *int
		name  string
		def   int
		usage string
	}{
		{&f.renewMargin, "subnet-lease-renew-margin", 60, "subnet lease renewal margin, in minutes, ranging from 1 to 1439"},
		{&f.healthzPort, "healthz-port", 0, "the port for healthz server to listen(0 to disable)"},
		{&f.iptablesResync, "iptables-resync", 5, "resync period for the masquerade and forward rules, in seconds"},
		{&f.flowLogMaxSize, "flow-log-max-size", int(flowlog.DefaultMaxSize >> 20), "kube: rotate the flow log when it would pass this many MiB (cnibox)"},
		{&f.flowLogMaxFiles, "flow-log-max-files", flowlog.DefaultMaxFiles, "kube: rotated flow logs kept (cnibox)"},
		{&f.flowLogRate, "flow-log-rate", flowlog.DefaultRate, "kube: flow log records a second at most (bursts of 5 seconds' worth); the rest are summed in a suppressed record each second; -1: no limit (cnibox)"},
		{&f.dnsProxyPort, "dns-proxy-port", 53053, "kube, with --cluster-network-policies: the port of the DNS proxy that learns the addresses of domainNames peers, on every node address (the pods' DNS is sent to it; 0: domainNames peers allow nothing) (cnibox)"},
		{&f.fastPathPackets, "fast-path-packets", nft.DefaultFastPathAfter, "with --fast-path: the packets (both ways) a connection carries through the forward chains before it is offloaded (cnibox)"},
		{&f.policyResync, "policy-resync", 300, "kube: replace the whole policy table with the model, and write the pods' MultiNetworkPolicy tables again, every this many seconds, putting back what else changed in them (0: never) (cnibox)"},
		{&f.verbosity, "v", 0, "number for the log level verbosity (>= 1: debug)"},
	}
}

// envPrefix is flanneld's: every flag can be given as FLANNELD_<FLAG>,
// the name upper-cased with '-' turned into '_' (FLANNELD_IFACE,
// FLANNELD_IP_MASQ), when the command line does not give it.
const envPrefix = "FLANNELD"

// envName returns the variable of flag name.
func envName(name string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	return parseFlagsEnv(args, stderr, os.Getenv)
}

// parseFlagsEnv parses args, then fills the flags args left out from
// FLANNELD_<FLAG> (getenv), then resolves the etcd secrets.
func parseFlagsEnv(args []string, stderr io.Writer, getenv func(string) string) (*flags, error) {
	f := &flags{set: map[string]bool{}}
	fs := f.flagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every setting is a flag (see --help)", fs.Args())
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := setFromEnv(fs, f.set, getenv); err != nil {
		return nil, err
	}
	if err := resolveSecrets(fs, f, getenv); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	if err := f.validateProxyMode(getenv); err != nil {
		return nil, err
	}
	return f, nil
}

// flagSet registers every flag of f.
func (f *flags) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cnibox-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range f.stringFlags() {
		fs.StringVar(s.p, s.name, s.def, s.usage)
	}
	for _, b := range f.boolFlags() {
		fs.BoolVar(b.p, b.name, b.def, b.usage)
	}
	for _, i := range f.intFlags() {
		fs.IntVar(i.p, i.name, i.def, i.usage)
	}
	fs.Var(&f.iface, "iface", "interface to use (IP or name) for inter-host communication. Can be specified multiple times to check each option in order. Returns the first match found.")
	fs.Var(&f.ifaceRegex, "iface-regex", "regex expression to match the first interface to use (IP or name) for inter-host communication. Can be specified multiple times to check each regex in order. Returns the first match found. Regexes are checked after specific interfaces specified by the iface option have already been checked.")
	fs.DurationVar(&f.leaseTTL, "subnet-lease-ttl", etcdlease.DefaultTTL, "etcd: how long a lease lives without renewal (cnibox)")
	fs.DurationVar(&f.resyncInterval, "resync-interval", agent.DefaultResyncInterval, "how often the kernel state is compared with the leases in full (cnibox)")
	f.pod.register(fs)
	f.ipam.register(fs)
	f.svc.register(fs)
	f.lb.register(fs)
	return fs
}

// setFromEnv sets every flag that set does not hold from FLANNELD_<FLAG>,
// as flanneld does (coreos/pkg's flagutil.SetFlagsFromEnv): an empty
// variable is unset. A value the flag cannot take is an error naming the
// variable (flanneld logs it and runs with the default).
func setFromEnv(fs *flag.FlagSet, set map[string]bool, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || err != nil {
			return
		}
		key := envName(fl.Name)
		v := getenv(key)
		if v == "" {
			return
		}
		if serr := fs.Set(fl.Name, v); serr != nil {
			err = fmt.Errorf("$%s=%q: %w (it sets --%s)", key, v, serr, fl.Name)
			return
		}
		set[fl.Name] = true
	})
	return err
}

// validate checks what flanneld checks at start, and what cnibox cannot
// run with.
func (f *flags) validate() error {
	if f.renewMargin <= 0 || f.renewMargin >= 24*60 {
		return fmt.Errorf("--subnet-lease-renew-margin %d is out of range: use 1 to 1439 (minutes)", f.renewMargin)
	}
	if f.flowLogMaxSize <= 0 || f.flowLogMaxFiles <= 0 || f.flowLogRate == 0 || f.flowLogRate < -1 {
		return fmt.Errorf("--flow-log-max-size %d, --flow-log-max-files %d, --flow-log-rate %d: use sizes and counts of at least 1, and a rate of at least 1 (or -1: no limit)", f.flowLogMaxSize, f.flowLogMaxFiles, f.flowLogRate)
	}
	if f.fastPathPackets < 1 || f.fastPathPackets > 1<<20 {
		return fmt.Errorf("--fast-path-packets %d is out of range: use 1 to 1048576 (or --fast-path=false for no fast path)", f.fastPathPackets)
	}
	if f.policyResync < 0 {
		return fmt.Errorf("--policy-resync %d: use 0 (never) or a period in seconds", f.policyResync)
	}
	if f.iptablesResync <= 0 {
		return fmt.Errorf("--iptables-resync %d: use a period of at least 1 (seconds)", f.iptablesResync)
	}
	if f.healthzPort < 0 || f.healthzPort > 65535 {
		return fmt.Errorf("--healthz-port %d is out of range: use 1 to 65535, or 0 to serve no healthz", f.healthzPort)
	}
	if f.healthzPort > 0 {
		if _, err := netip.ParseAddr(f.healthzIP); err != nil {
			return fmt.Errorf("--healthz-ip %q is not an IP address: use one of this node's, or 0.0.0.0 for all", f.healthzIP)
		}
	}
	if f.verbosity < 0 {
		return fmt.Errorf("-v %d: use 0 or more", f.verbosity)
	}
	trust, err := podapi.ParseNADTrust(f.pod.nadTrustList)
	if err != nil {
		return fmt.Errorf("%w: list namespaces, comma separated, or \"*\" for every one", err)
	}
	f.pod.nadTrust = trust
	if f.dnsProxyPort < 0 || f.dnsProxyPort > 65535 || f.dnsProxyPort == 53 {
		return fmt.Errorf("--dns-proxy-port %d: use a free port of 1-65535 other than 53 (the pods' own DNS), or 0 for no proxy", f.dnsProxyPort)
	}
	f.dnsResolvers = nil
	for _, s := range strings.Split(f.dnsTrusted, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("--dns-trusted-resolvers: %q is not an address: list resolvers' addresses, comma separated, e.g. 169.254.20.10,10.0.0.53", s)
		}
		f.dnsResolvers = append(f.dnsResolvers, a.Unmap())
	}
	if f.multiNetworkPolicies && (!f.pod.enabled() || f.pod.only) {
		return fmt.Errorf("--multi-network-policies: the secondary networks' policies are written as the multi role's ADD reports a pod's networks, through the pod API: add --pod-api")
	}
	if err := f.lb.validate(); err != nil {
		return err
	}
	if f.lb.announce && !f.kubeSubnetMgr {
		return fmt.Errorf("--lb-announce: the addresses are held on the overlay's uplink, which --kube-subnet-mgr finds: add --kube-subnet-mgr")
	}
	if err := f.svc.validate(); err != nil {
		return err
	}
	if f.pod.multusConf.dir != "" && !f.pod.enabled() {
		return fmt.Errorf("--multus-conf-dir %s: multi's config needs the pod API: add --pod-api or --pod-api-only", f.pod.multusConf.dir)
	}
	return nil
}

// healthzAddr is where --healthz-ip/--healthz-port serve ("" when the port
// is 0).
// noKernel: the agent serves the pod API or the cluster IPAM alone
// (--pod-api-only, --cluster-ipam-only): another daemon owns the node's
// network (the Multus-style DaemonSet runs such an agent without a
// capability), so this one leaves every table, link and route alone; the
// services table too when --service-proxy is off (on, the agent runs the
// proxy and the table is its own).
func (f *flags) noKernel() bool { return f.pod.only || f.ipam.only }

func (f *flags) healthzAddr() string {
	if f.healthzPort == 0 {
		return ""
	}
	return net.JoinHostPort(f.healthzIP, strconv.Itoa(f.healthzPort))
}

// logLevelName is --log-level, or debug when -v >= 1 and --log-level was
// not given.
func (f *flags) logLevelName() string {
	if f.verbosity >= 1 && !f.set["log-level"] {
		return "debug"
	}
	return f.logLevel
}

// renewMarginDuration is --subnet-lease-renew-margin as a duration.
func (f *flags) renewMarginDuration() time.Duration {
	return time.Duration(f.renewMargin) * time.Minute
}

// resyncPeriod is --iptables-resync as a duration.
func (f *flags) resyncPeriod() time.Duration {
	return time.Duration(f.iptablesResync) * time.Second
}
