// Command cnibox-agent is the overlay node agent: a drop-in for flanneld with
// the vxlan backend. It leases this node's pod subnet out of the cluster
// network (etcd, or Kubernetes with --kube-subnet-mgr), creates the VXLAN
// device, programs a route, a permanent neighbour and an FDB entry for every
// other node, writes the subnet file, and mirrors its state into cnibox's
// store for the vxlan CNI role and `cnibox overlay`.
//
// It runs in the foreground and logs to stderr. SIGTERM or SIGINT stop it
// and leave the kernel state in place for the next start.
//
// This is the only binary that links the etcd client and client-go: cnibox,
// which runtimes exec on every CNI call, must stay lean.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/lease/etcdlease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/store"
)

// version is set by the build (-X main.version=...).
var version = "dev"

// flags are flanneld's, so operators' unit files carry over, plus a few of
// cnibox's own.
type flags struct {
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
	iface                string
	publicIP             string
	publicIPv6           string
	subnetFile           string
	ipMasq               bool
	renewMargin          int
	dataDir              string
	txChecksumOff        bool
	resyncInterval       time.Duration
	logLevel             string
	healthAddr           string
	showVersion          bool
	pod                  podAPIFlags // podapi_flags.go
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
		{&f.etcdPrefix, "etcd-prefix", etcdlease.DefaultPrefix, "etcd prefix of the network config and the leases"},
		{&f.etcdKeyfile, "etcd-keyfile", "", "SSL key file used to secure etcd communication"},
		{&f.etcdCertfile, "etcd-certfile", "", "SSL certification file used to secure etcd communication"},
		{&f.etcdCAFile, "etcd-cafile", "", "SSL Certificate Authority file used to secure etcd communication"},
		{&f.etcdUsername, "etcd-username", "", "username for BasicAuth to etcd"},
		{&f.etcdPassword, "etcd-password", "", "password for BasicAuth to etcd (visible in the process list: prefer --etcd-password-file or $CNIBOX_ETCD_PASSWORD)"},
		{&f.etcdPasswordFile, "etcd-password-file", "", "file holding the password for BasicAuth to etcd"},
		{&f.kubeconfig, "kubeconfig-file", "", "kubeconfig file (default: in-cluster config)"},
		{&f.kubeAPIURL, "kube-api-url", "", "Kubernetes API server URL (default: from the kubeconfig or in-cluster)"},
		{&f.kubeAnnotationPrefix, "kube-annotation-prefix", "flannel.alpha.coreos.com", "kube: prefix of the node annotations"},
		{&f.netConfPath, "net-config-path", "/etc/kube-flannel/net-conf.json", "kube: path of the network configuration (net-conf.json)"},
		{&f.nodeName, "node-name", "", "kube: this node's name (default $NODE_NAME, else the hostname)"},
		{&f.iface, "iface", "", "interface (name or address) toward the other nodes (default: the default route's)"},
		{&f.publicIP, "public-ip", "", "IP accessible by other nodes for inter-host communication (default: the interface's)"},
		{&f.publicIPv6, "public-ipv6", "", "IPv6 accessible by other nodes for inter-host communication (default: the interface's)"},
		{&f.subnetFile, "subnet-file", agent.DefaultSubnetFile, "filename where env variables (subnet, MTU, ...) will be written to"},
		{&f.dataDir, "data-dir", "", "cnibox store directory (default $CNIBOX_DATA_DIR or " + store.DefaultDir + ") (cnibox)"},
		{&f.logLevel, "log-level", "info", "debug, info, warn or error (cnibox)"},
		{&f.healthAddr, "health-addr", "", "serve /healthz (running), /readyz (lease held, device up) and /metrics (Prometheus) on this address, e.g. 127.0.0.1:9666 (cnibox)"},
	}
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("cnibox-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range f.stringFlags() {
		fs.StringVar(s.p, s.name, s.def, s.usage)
	}
	fs.DurationVar(&f.leaseTTL, "subnet-lease-ttl", etcdlease.DefaultTTL, "etcd: how long a lease lives without renewal (cnibox)")
	fs.DurationVar(&f.resyncInterval, "resync-interval", agent.DefaultResyncInterval, "how often the kernel state is compared with the leases in full (cnibox)")
	fs.IntVar(&f.renewMargin, "subnet-lease-renew-margin", 60, "subnet lease renewal margin, in minutes")
	fs.BoolVar(&f.kubeSubnetMgr, "kube-subnet-mgr", false, "use the Kubernetes API (node.spec.podCIDR) instead of etcd for leases")
	fs.BoolVar(&f.ipMasq, "ip-masq", false, "masquerade traffic from pods leaving the cluster network (nftables table inet cnibox-overlay)")
	fs.BoolVar(&f.txChecksumOff, "vxlan-tx-checksum-off", false, "turn tx checksum offload off on the VXLAN device (kernel bug with NATed VXLAN) (cnibox)")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	f.pod.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every setting is a flag (see --help)", fs.Args())
	}
	if err := resolveSecrets(fs, f, os.Getenv); err != nil {
		return nil, err
	}
	return f, nil
}

func main() {
	// The agent is an event loop that spends its life waiting; one P keeps
	// each wake-up on one thread (no spinning threads handing work over),
	// which matters with hundreds of agents on few cores (benchmarks), and
	// saves threads. $GOMAXPROCS still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "cnibox-agent:", err)
		return 2
	}
	if f.showVersion {
		fmt.Fprintln(stdout, "cnibox-agent", version)
		return 0
	}
	if err := kubeHandoff(f, args); err != nil { // handoff*.go: the lean etcd build execs the full one
		fmt.Fprintln(stderr, "cnibox-agent:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "cnibox-agent: --log-level %q: use debug, info, warn or error\n", f.logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runAgent(ctx, f, log); err != nil {
		log.Error("cnibox-agent failed", "err", err)
		return 1
	}
	return 0
}

func runAgent(ctx context.Context, f *flags, log *slog.Logger) error {
	var health *agent.Health
	if f.healthAddr != "" {
		health = &agent.Health{Metrics: agent.NewMetrics()}
		wait, err := agent.ServeHealth(ctx, f.healthAddr, health, log)
		if err != nil {
			return err
		}
		defer wait()
	}
	if f.pod.enabled() {
		// The pod API stops with the agent, whichever way the agent ends
		// (a failed start too): waiting for it without cancelling first
		// would block forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		wait, err := startPodAPI(ctx, f, log)
		if err != nil {
			return err
		}
		if f.pod.only {
			health.SetRunning(true)
			health.SetReady(true)
			return wait()
		}
		defer func() {
			cancel()
			if err := wait(); err != nil {
				log.Error("pod API", "err", err)
			}
		}()
	}
	o := agent.Options{
		NodeName:       nodeName(f.nodeName),
		Health:         health,
		Iface:          f.iface,
		SubnetFile:     f.subnetFile,
		IPMasq:         f.ipMasq,
		DataDir:        f.dataDir,
		TxChecksumOff:  f.txChecksumOff,
		RenewMargin:    time.Duration(f.renewMargin) * time.Minute,
		ResyncInterval: f.resyncInterval,
		Log:            log,
	}
	var err error
	if o.PublicIP, err = parseIP("--public-ip", f.publicIP, true); err != nil {
		return err
	}
	if o.PublicIPv6, err = parseIP("--public-ipv6", f.publicIPv6, false); err != nil {
		return err
	}
	if f.kubeSubnetMgr {
		b, err := os.ReadFile(f.netConfPath)
		if err != nil {
			return fmt.Errorf("--net-config-path: %w", err)
		}
		if o.NetConf, err = netconf.Parse(b); err != nil {
			return fmt.Errorf("--net-config-path %s: %w", f.netConfPath, err)
		}
		m, closer, err := newKubeManager(ctx, f, o.NetConf, log)
		if err != nil {
			return err
		}
		defer closer()
		o.Manager = m
		return agent.Run(ctx, o)
	}
	m, err := etcdlease.New(etcdlease.Config{
		Endpoints: splitList(f.etcdEndpoints),
		Prefix:    f.etcdPrefix,
		TTL:       f.leaseTTL,
		CAFile:    f.etcdCAFile, CertFile: f.etcdCertfile, KeyFile: f.etcdKeyfile,
		Username: f.etcdUsername, Password: f.etcdPassword,
		Log: log,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	o.Manager = m
	return agent.Run(ctx, o)
}

// manager is what the kube backend constructor returns.
type manager = lease.Manager

func parseIP(flagName, s string, v4 bool) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Unmap().Is4() != v4 {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IPv%s address", flagName, s, map[bool]string{true: "4", false: "6"}[v4])
	}
	return a.Unmap(), nil
}

// nodeName is --node-name, else $NODE_NAME, else the host name.
func nodeName(flag string) string {
	if flag != "" {
		return flag
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
