package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/cnibox/cnibox/agent/multusconf"
)

// multusConfFlags: the agent keeps multi's config in front of the node's
// primary CNI config, as Multus' thick daemon does (cnibox-multus.yaml).
type multusConfFlags struct {
	dir, hostDir, name, readiness string
	keep                          bool
	// isolation and global: the config's namespaceIsolation and
	// globalNamespaces (Multus' fields, read by the multi role).
	isolation bool
	global    string
}

func (m *multusConfFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.dir, "multus-conf-dir", "", "write multi's config over the node's primary CNI config in this directory (the node's /etc/cni/net.d as the agent "+
		"sees it), keep it current and remove it on exit, as Multus' daemon does; empty: off (cnibox)")
	fs.StringVar(&m.hostDir, "multus-host-conf-dir", "/etc/cni/net.d", "that directory as the node sees it: the config's clusterNetwork path (cnibox)")
	fs.StringVar(&m.name, "multus-conf-name", multusconf.DefaultName, "the file written; it must sort before the primary's (cnibox)")
	fs.StringVar(&m.readiness, "multus-readiness-indicator-file", "", "the config's readinessindicatorfile: pods wait for this file (e.g. /run/flannel/subnet.env) (cnibox)")
	fs.BoolVar(&m.keep, "multus-keep-conf", false, "leave the file on exit (Multus' cleanup off) (cnibox)")
	fs.BoolVar(&m.isolation, "multus-namespace-isolation", false, "the config's namespaceIsolation: a pod selects NetworkAttachmentDefinitions (networks and default-network "+
		"annotations) of its own namespace and of --multus-global-namespaces only; off, as in Multus, any namespace's (cnibox-multus.yaml turns it on) (cnibox)")
	fs.StringVar(&m.global, "multus-global-namespaces", "", "the config's globalNamespaces: the comma separated namespaces every pod may select NADs of under "+
		"--multus-namespace-isolation; empty: Multus' default, default (cnibox-multus.yaml: default,kube-system) (cnibox)")
}

// extra are the fields of multi's config the flags set.
func (m *multusConfFlags) extra() map[string]any {
	extra := map[string]any{}
	if m.readiness != "" {
		extra["readinessindicatorfile"] = m.readiness
	}
	if m.isolation {
		extra["namespaceIsolation"] = true
	}
	if m.global != "" {
		extra["globalNamespaces"] = m.global
	}
	return extra
}

// startMultusConf runs the writer when --multus-conf-dir is set; stop ends
// it and waits until it has removed its file.
func startMultusConf(ctx context.Context, m *multusConfFlags, log *slog.Logger) (stop func()) {
	if m.dir == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	extra := m.extra()
	go func() {
		defer close(done)
		if err := multusconf.Run(ctx, multusconf.Options{Dir: m.dir, HostDir: m.hostDir, Name: m.name, Extra: extra, Keep: m.keep, Log: log}); err != nil {
			log.Error("multus config", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}
