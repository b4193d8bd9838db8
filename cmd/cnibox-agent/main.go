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

	"github.com/cnibox/cnibox/agent"
	"github.com/cnibox/cnibox/agent/lease"
	"github.com/cnibox/cnibox/agent/lease/etcdlease"
	"github.com/cnibox/cnibox/agent/netconf"
	"github.com/cnibox/cnibox/internal/buildinfo"
)

// version is set by the build (-X main.version=...: git describe's); the
// release and the commit --version prints beside it are
// internal/buildinfo's, as cnibox's.
var version = "dev"

func main() {
	// The agent is an event loop that spends its life waiting; one P keeps
	// each wake-up on one thread (no spinning threads handing work over),
	// which matters with hundreds of agents on few cores (benchmarks), and
	// saves threads. $GOMAXPROCS still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	atExit()
	os.Exit(code)
}

// atExit runs before the agent exits: the profiles' end with -tags
// cniboxprof (pprof.go), nothing otherwise.
var atExit = func() {}

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
		buildinfo.Get().Write(stdout, "cnibox-agent", version)
		return 0
	}
	if err := kubeHandoff(f, args); err != nil { // handoff*.go: the lean etcd build execs the full one
		fmt.Fprintln(stderr, "cnibox-agent:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevelName())); err != nil {
		fmt.Fprintf(stderr, "cnibox-agent: --log-level %q: use debug, info, warn or error\n", f.logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	env, err := readFlannelEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "cnibox-agent:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runAgent(ctx, f, env, log); err != nil {
		log.Error("cnibox-agent failed", "err", err)
		return 1
	}
	return 0
}

func runAgent(ctx context.Context, f *flags, env flannelEnv, log *slog.Logger) error {
	releaseStartPages(log) // what the packages' initialisation touched; again after the first sync
	health, wait, err := serveHealth(ctx, f, log)
	if err != nil {
		return err
	}
	defer wait()
	// The overlay's flags are judged before anything reaches the kernel
	// (the services table's removal below is the first that does).
	o := agent.Options{
		Health: health,
		Interface: agent.InterfaceOpts{
			Ifaces: f.iface, Regexes: f.ifaceRegex, CanReach: f.ifaceCanReach,
		},
		SubnetFile:           f.subnetFile,
		IPMasq:               f.ipMasq,
		IPMasqNotFullyRandom: f.ipMasqFullyRandomDisable,
		ForwardRules:         f.iptablesForwardRules,
		BlackholeRoute:       f.blackholeRoute,
		FastPath:             f.fastPath,
		FastPathAfter:        uint64(f.fastPathPackets),
		RulesResync:          f.resyncPeriod(),
		DataDir:              f.dataDir,
		TxChecksumOff:        f.txChecksumOff,
		RenewMargin:          f.renewMarginDuration(),
		ResyncInterval:       f.resyncInterval,
		FirstSynced:          func() { releaseStartPages(log) },
		Log:                  log,
	}
	if err := o.Interface.Compile(); err != nil {
		return err
	}
	if o.Interface.PublicIP, err = parseIP("--public-ip", f.publicIP, true); err != nil {
		return err
	}
	if o.Interface.PublicIPv6, err = parseIP("--public-ipv6", f.publicIPv6, false); err != nil {
		return err
	}
	if f.kubeSubnetMgr || f.pod.enabled() || f.ipam.needsKube() || f.svc.proxy || f.lb.on {
		if f.nodeName, err = resolveNodeName(ctx, f, env, log); err != nil {
			return err
		}
		if err := startKube(ctx, f, log); err != nil { // the informer cache the Kubernetes features share
			return err
		}
	} else {
		f.nodeName = nodeName(f.nodeName, env)
	}
	stopServices, proxyDone, err := startServices(ctx, f, health, log) // services.go: --service-proxy, or its table removed
	if err != nil {
		return err
	}
	defer stopServices()
	{
		// (stopped first whichever way the agent ends: it gives the Lease up)
		lctx, cancel := context.WithCancel(ctx)
		wait := startLBIPAM(lctx, f, health, log) // lbipam.go: --lb-ipam
		defer func() { cancel(); wait() }()
	}
	log.Debug("flanneld environment", "EVENT_QUEUE_DEPTH", env.eventQueueDepth, "CONT_WHEN_CACHE_NOT_READY", env.contWhenCacheNotReady)
	if f.pod.enabled() || f.ipam.enabled() {
		// The pod API stops with the agent, whichever way the agent ends
		// (a failed start too): waiting for it without cancelling first
		// would block forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		start := startPodAPI
		if f.ipam.enabled() { // clusteripam.go: on the pod API's socket, or alone
			if err := startClusterIPAM(ctx, f, log); err != nil {
				return err
			}
			if !f.pod.enabled() {
				start = serveIPAMOnly
			}
		}
		wait, err := start(ctx, f, log)
		if err != nil {
			return err
		}
		defer startMultusConf(ctx, &f.pod.multusConf, log)() // after the pod API: multi needs it
		if f.pod.only || f.ipam.only || f.svc.only {
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
	if f.svc.only {
		return proxyOnly(ctx, proxyDone, log)
	}
	o.NodeName = f.nodeName
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
		if err := startPolicy(ctx, f, health, log); err != nil {
			return err
		}
		if nets := overlayNetworks(o.NetConf); len(nets) > 0 {
			// Egress gateways and LoadBalancer addresses, IPv4, IPv6 or
			// both (a single-stack IPv6 cluster too, issue 64); each
			// stopped first whichever way the agent ends: it waits for its
			// context.
			ectx, cancel := context.WithCancel(ctx)
			wait := startEgress(ectx, f, health, nets, log)
			defer func() { cancel(); wait() }()
			actx, acancel := context.WithCancel(ctx)
			await := startLBAnnounce(actx, f, health, nets, log) // lbannounce.go: --lb-announce
			defer func() { acancel(); await() }()
		}
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

// proxyOnly is the agent with --service-proxy-only (and neither the pod
// API nor the cluster IPAM): no lease and no overlay, the node's pods
// are another CNI's. It runs until ctx ends, or fails when the proxy
// stopped on its own (the DaemonSet restarts it; the kernel keeps the
// table meanwhile).
func proxyOnly(ctx context.Context, proxyDone <-chan error, log *slog.Logger) error {
	log.Info("services: the Services proxy alone (--service-proxy-only): no lease, no overlay")
	select {
	case <-ctx.Done():
		return nil
	case err := <-proxyDone:
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("ended")
		}
		return fmt.Errorf("--service-proxy-only: the proxy stopped: %w", err)
	}
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
func nodeName(flag string, env flannelEnv) string {
	if flag != "" {
		return flag
	}
	if env.nodeName != "" {
		return env.nodeName
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
