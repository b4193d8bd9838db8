package cli

import (
	"slices"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/store"
)

// Flags shared by several commands.
var (
	jsonFlag    = &ucli.BoolFlag{Name: "json", Usage: "print JSON (for scripts) instead of a table"}
	dataDirFlag = &ucli.StringFlag{Name: "data-dir", Usage: "store directory (default $CNIBOX_DATA_DIR or " + store.DefaultDir + ")"}
	confDirFlag = &ucli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "the runtime's CNI config directory"}
	binDirFlag  = &ucli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", Usage: "the runtime's CNI plugin directory"}
	cacheFlag   = &ucli.StringFlag{Name: "cache-dir", Value: "/var/lib/cni", Usage: "libcni's cache directory (the runtime's record of attachments)"}
	networkFlag = &ucli.StringFlag{Name: "network", Usage: "only this network"}
)

// commands is the command tree: each command's help and flags, and the
// function that runs it (in the command's own file). docs/cli.md is its
// manual.
func commands(o Options) []*ucli.Command {
	// The flags of the overlay commands: --device, and --json in their own words.
	overlayFlags := []ucli.Flag{
		dataDirFlag,
		&ucli.StringFlag{Name: "device", Usage: "the overlay's VXLAN device when the node has several (e.g. flannel.1)"},
		&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
	}
	return []*ucli.Command{
		{
			Name:      "version",
			Usage:     "print the cnibox version and the CNI spec versions it speaks",
			UsageText: "cnibox version [--json]   (also: cnibox --version)\n\nExample: cnibox version --json",
			Flags:     []ucli.Flag{jsonFlag},
			Action:    o.printVersion,
		},
		{
			Name:      "roles",
			Usage:     "list the CNI plugin types this binary answers as",
			UsageText: "cnibox roles [--json]\n\nExample: cnibox roles   (each is a symlink name in the CNI bin dir; see cnibox install)",
			Flags:     []ucli.Flag{jsonFlag},
			Action:    o.printRoles,
		},
		{
			Name:  "check",
			Usage: "check network config files as the runtime and each plugin would read them, before a pod does",
			UsageText: "cnibox check FILE|DIR... [--bin-dir DIRS] [--node] [--strict] [--json]\n\n" +
				"Loads each file as a runtime does (a dir: its *.conf, *.conflist and *.json in name order, the first\n" +
				"the default network; by name, libcni loads every .conflist before any .conf) and runs each plugin's\n" +
				"own parser, the one its ADD runs; then what the chain needs: a main plugin before a chained one, the\n" +
				"capabilities a chained role reads, the cniVersion each other plugin speaks (its VERSION answer).\n" +
				"Errors name the field's path, the value and the fix; fields no plugin reads are warnings with the\n" +
				"nearest known name. Plugins are looked up in --bin-dir, else $CNI_PATH. On a node (root, the bin dir\n" +
				"there; --node) cnibox's roles must be in the bin dir and what each ADD needs of the node there: the\n" +
				"interfaces the configs name (a macvlan master, a host-device device), the files and daemons' sockets\n" +
				"(dhcp's, cnibox-agent's, subnet.env) and the kernel's features (read from /sys/module, its config\n" +
				"or /lib/modules; nothing is loaded); off a node (a laptop, CI) cnibox's roles count as present.\n" +
				"Exit 0: clean (warnings allowed); 1: an error; 2: warnings only, with --strict.\n" +
				"Example: cnibox check /etc/cni/net.d\n" +
				"Example: cnibox check --strict --json examples/10-bridge.conflist",
			Flags: []ucli.Flag{
				&ucli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", Usage: "the plugin directories, colon separated (default $CNI_PATH, else /opt/cni/bin)"},
				&ucli.BoolFlag{Name: "node", Usage: "check as on a node: the roles must be in the bin dirs, the interfaces, files, sockets and kernel features the configs need on the node (default: as root with a bin dir; else cnibox's roles count as present)"},
				&ucli.BoolFlag{Name: "strict", Usage: "exit 2 when there are warnings and no errors"},
				jsonFlag,
			},
			Action: o.runCheck,
		},
		{
			Name:  "install",
			Usage: "install the binary, a link per role and optionally a conflist, each atomically",
			UsageText: "cnibox install [--dir DIR] [--binary SRC | --target BIN] [--force | --keep-foreign]\n" +
				"               [--conflist SRC [--conf-dir DIR] [--conf-name NAME] [--secondary-networks]]\n\n" +
				"Copies the binary to DIR/cnibox and makes DIR/<role> a relative symlink to it for every role;\n" +
				"then, with --conflist, puts the network configuration list into the conf dir. Each file is\n" +
				"written under a temporary name in its directory, synced and renamed over the old one: a\n" +
				"runtime sees the old file or the new one, never a partial one, and a process executing the\n" +
				"old binary keeps running it (the binary is never opened for writing, so no \"text file busy\").\n" +
				"Files already up to date are left alone. The conflist comes last, so a runtime that finds\n" +
				"it finds the plugins too. It is checked first (cnibox check), and refused when another file of\n" +
				"the conf dir sorts before it: that one stays the default network (--force installs anyway).\n\n" +
				"Example: cnibox install --dir /opt/cni/bin\n" +
				"Example: cnibox install --dir /host/opt/cni/bin --conflist /etc/cnibox/cni-conf.json \\\n" +
				"           --conf-dir /host/etc/cni/net.d --conf-name 10-cnibox.conflist   (a DaemonSet's init container)\n" +
				"Example: cnibox install --dir /opt/cni/bin --target /usr/local/bin/cnibox   (links only, no copy)\n" +
				"Example: cnibox install --dir /host/opt/cni/bin --keep-foreign   (next to a primary CNI's plugins: cnibox-multus.yaml)",
			Flags: []ucli.Flag{
				&ucli.StringFlag{Name: "dir", Value: "/opt/cni/bin", Usage: "the CNI plugin directory"},
				&ucli.StringFlag{Name: "binary", Usage: "the binary copied to DIR/cnibox (default: this executable)"},
				&ucli.StringFlag{Name: "target", Usage: "copy nothing: link the roles to this existing binary instead"},
				&ucli.BoolFlag{Name: "force", Usage: "replace files and links that are not cnibox's; install --conflist even when another file of the conf dir sorts first (the runtime's default network)"},
				&ucli.BoolFlag{Name: "keep-foreign", Usage: "leave files and links that are not cnibox's as they are and link only the other roles (without it, such a file is an error)"},
				&ucli.StringFlag{Name: "conflist", Usage: "a network configuration list to install (checked first)"},
				&ucli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "where --conflist goes"},
				&ucli.StringFlag{Name: "conf-name", Usage: "the conflist's file name in --conf-dir, ending in .conflist (default: the name of --conflist)"},
				&ucli.BoolFlag{Name: "secondary-networks", EnvVars: []string{"CNIBOX_SECONDARY_NETWORKS"},
					Usage: "install --conflist wrapped in the multi role: the pod network as it is, plus the networks a pod's k8s.v1.cni.cncf.io/networks annotation names (NetworkAttachmentDefinitions; needs cnibox-agent --pod-api)"},
			},
			Action: o.install,
		},
		{
			Name:  "exec",
			Usage: "run a network config by hand, the way a runtime does (like cnitool)",
			UsageText: "cnibox exec add|check|del|gc|status --net NAME|--conf FILE [options]\n\n" +
				"Example: cnibox exec add --net cnibox --new-netns test1 && cnibox exec del --net cnibox --new-netns test1",
			Subcommands: execVerbs(o.Registry),
		},
		{
			Name:  "inspect",
			Usage: "show the node's CNI state: active config, endpoints, address pools, topology",
			Description: "Read-only views of what a runtime would use and what cnibox set up. Every view takes --json.\n\n" +
				"Examples:\n" +
				"  cnibox inspect config\n" +
				"  cnibox inspect endpoints --pod default/web-0 --detail\n" +
				"  cnibox inspect ipam --network cnibox\n" +
				"  cnibox inspect topology --format dot | dot -Tsvg > node.svg",
			// The node's configs and addresses, what the roles keep
			// (roleInspect), then the agent's tables and the topology.
			Subcommands: slices.Concat([]*ucli.Command{
				{
					Name:  "config",
					Usage: "the network config a runtime would pick, why, and whether its plugins are there",
					UsageText: "cnibox inspect config [--conf-dir DIR] [--bin-dir DIR] [--json]\n\n" +
						"Exits 1 when there is no usable config or it does not validate.\n" +
						"Example: cnibox inspect config --conf-dir /etc/cni/net.d --bin-dir /opt/cni/bin",
					Flags:  []ucli.Flag{confDirFlag, binDirFlag, jsonFlag},
					Action: o.runInspectConfig,
				},
				{
					Name:  "endpoints",
					Usage: "every attachment on the node, with everything the store recorded",
					UsageText: "cnibox inspect endpoints [--network N] [--pod NS/NAME] [--container ID] [--detail] [--json]\n\n" +
						"Example: cnibox inspect endpoints --pod default/web-0 --detail",
					Flags: []ucli.Flag{
						networkFlag,
						&ucli.StringFlag{Name: "pod", Usage: "only this pod, as `NAMESPACE/NAME` (or NAME in any namespace)"},
						&ucli.StringFlag{Name: "container", Usage: "only containers whose ID starts with `ID`"},
						&ucli.BoolFlag{Name: "detail", Aliases: []string{"d"}, Usage: "one block per endpoint with every field and its live state"},
						dataDirFlag,
						jsonFlag,
					},
					Action: o.inspectEndpoints,
				},
				{
					Name:  "ipam",
					Usage: "each address range and pool, how full it is, and every reservation with its owner",
					UsageText: "cnibox inspect ipam [--network N] [--conf-dir DIR] [--data-dir DIR] [--agent-socket SOCK] [--json]\n\n" +
						"Ranges come from the host-local sections of the configs in --conf-dir and from the store\n" +
						"(every range set that handed out an address); cloud pools from cloud IPAM's last answer;\n" +
						"the whereabouts role's cluster IPPools (every node's) from cnibox-agent, one entry per pool.\n" +
						"Example: cnibox inspect ipam --network cnibox",
					Flags: []ucli.Flag{
						&ucli.StringFlag{Name: "network", Usage: "only this network (or cluster IPPool)"},
						confDirFlag,
						dataDirFlag,
						agentSocketFlag,
						jsonFlag,
					},
					Action: o.runInspectIPAM,
				},
				{
					Name:  "cluster-ipam",
					Usage: "the whereabouts role's cluster pools (IPPools, NodeSlicePools) and queued releases, from cnibox-agent",
					UsageText: "cnibox inspect cluster-ipam [--agent-socket SOCK] [--json]\n\n" +
						"Every IPPool with its addresses and their pods, each NodeSlicePool's leased slices, and the\n" +
						"releases waiting for the API, as cnibox-agent --cluster-ipam reads them.\n" +
						"Example: cnibox inspect cluster-ipam --json",
					Flags:  []ucli.Flag{agentSocketFlag, jsonFlag},
					Action: inspectClusterIPAM,
				},
			}, roleInspect(o.Registry), []*ucli.Command{
				{
					Name:  "policy",
					Usage: "the node's NetworkPolicy table: the policies (that select POD), per direction, each rule with its packet counter",
					UsageText: "cnibox inspect policy [NS/POD] [--data-dir DIR] [--json]\n\n" +
						"The kernel's table cnibox-policy and its counters, named by the index cnibox-agent keeps in the store.\n" +
						"POD is NAMESPACE/NAME, or NAME in any namespace (as --pod takes it; one of several is an error).\n" +
						"Example: cnibox inspect policy default/web-0",
					Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
					Action: withHost(inspectPolicy),
				},
				{
					Name:  "services",
					Usage: "the Services this node serves (cnibox-agent --service-proxy): each frontend and the endpoints its traffic goes to",
					UsageText: "cnibox inspect services [--json]\n\n" +
						"The kernel's tables inet cnibox-services and cnibox-services-* (its shards), read back: one line per frontend (ClusterIP, NodePort, external address) with\n" +
						"its endpoints, or what it does without one (reject, drop), its session affinity and what it masquerades (docs/services.md).\n" +
						"Example: cnibox inspect services --json",
					Flags:  []ucli.Flag{jsonFlag},
					Action: withHost(inspectServices),
				},
				{
					Name:  "egress",
					Usage: "the egress gateways as this node sees them: each address, its holder, this node's part, its pods here",
					UsageText: "cnibox inspect egress [--data-dir DIR] [--json]\n\n" +
						"What cnibox-agent last recorded in the store (docs/egress.md).\n" +
						"Example: cnibox inspect egress",
					Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
					Action: inspectEgress,
				},
				{
					Name:  "lb",
					Usage: "the LoadBalancer pools (size, used, free), each address with its Services and the node that announces it on the LAN",
					UsageText: "cnibox inspect lb [--data-dir DIR] [--json]\n\n" +
						"What cnibox-agent --lb-announce last recorded in the store: the pools, every address a Service holds, its\n" +
						"announcer (from the address's Lease) and this node's part (docs/loadbalancer.md).\n" +
						"Example: cnibox inspect lb --json",
					Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
					Action: inspectLB,
				},
				{
					Name:  "topology",
					Usage: "the node's bridges, their ports, the pods behind them, and the overlay with its peers",
					UsageText: "cnibox inspect topology [--format text|dot|json] [--data-dir DIR]\n\n" +
						"The kernel's links joined with the endpoint records. dot is Graphviz input.\n" +
						"Example: cnibox inspect topology --format dot | dot -Tsvg > node.svg",
					Flags: []ucli.Flag{
						&ucli.StringFlag{Name: "format", Value: "text", Usage: "text (a tree), dot (Graphviz) or json"},
						dataDirFlag,
						jsonFlag,
					},
					Action: withHost(runTopology),
				},
			}),
		},
		{
			Name:  "overlay",
			Usage: "the VXLAN overlay of this node (what cnibox-agent holds and programmed)",
			UsageText: "cnibox overlay status|peers [--device DEV] [--data-dir DIR] [--json]\n\n" +
				"Exits 1 when the node has no overlay (no cnibox-agent store).\n" +
				"Example: cnibox overlay peers",
			Subcommands: []*ucli.Command{
				{
					Name:      "status",
					Usage:     "this node's lease, device, peer count, last sync",
					UsageText: "cnibox overlay status [--device DEV] [--data-dir DIR] [--json]\n\nExample: cnibox overlay status --json",
					Flags:     overlayFlags,
					Action:    withHost(overlayStatus),
				},
				{
					Name:      "peers",
					Usage:     "every other node: subnet, public IP, VTEP MAC, and whether route, neighbour and FDB entry in the kernel match",
					UsageText: "cnibox overlay peers [--device DEV] [--data-dir DIR] [--json]\n\nExample: cnibox overlay peers --device flannel.1",
					Flags:     overlayFlags,
					Action:    withHost(overlayPeers),
				},
			},
		},
		logReader{
			name: "logs", usage: "show the record each CNI call left in the log file",
			usageText: "cnibox logs [--file F] [--container ID] [--since D] [--errors] [--follow] [--json]",
			source:    "Every invocation writes one JSON record (role, command, container, ifname, netns, step timings, result or error).",
			one:       "call", what: "calls",
			columns:  "TIME (local), ROLE, VERB, CONTAINER (12 characters), IFNAME, NETWORK, TOOK and RESULT (ok, or ERROR code: message).",
			examples: []string{"cnibox logs --container 3f2a --since 1h"},
			flags: []ucli.Flag{
				&ucli.StringFlag{Name: "file", Usage: "log file (default $CNIBOX_LOG_FILE or " + cniplug.DefaultLogFile + ")"},
				&ucli.StringFlag{Name: "container", Usage: "only calls whose container ID starts with `ID`"},
				&ucli.BoolFlag{Name: "errors", Usage: "only failed calls"},
			},
			action: runLogs,
		}.command(),
		logReader{
			name: "flows", usage: "show the policy flow log: each connection's verdict and the policy and rule that decided",
			usageText: "cnibox flows [--namespace NS] [--pod [NS/]NAME] [--verdict V] [--policy [NS/]NAME] [--since D]\n" +
				"             [--follow] [--json] [--file F]",
			source: "Reads the flow log cnibox-agent writes (docs/flowlog.md).",
			one:    "flow", what: "flows",
			columns: "TIME (local), VERDICT, DIR (in, out), PROTO, SRC and DST (ns/pod:port, or ip:port outside the cluster), " +
				"POLICY (np, cnp:admin, cnp:baseline, snp, scnp / ns/name#rule; #isolation: the policies that isolate the pod). " +
				"A \"suppressed\" line counts the flows the agent's rate limit left out.",
			examples: []string{
				"cnibox flows --verdict deny --namespace shop --since 10m",
				"kubectl -n kube-system exec ds/cnibox -- cnibox flows --follow --pod shop/web-0",
				"cnibox flows --verdict staged-deny --json | jq .policy.name",
			},
			flags: []ucli.Flag{
				&ucli.StringFlag{Name: "file", Value: flowlog.DefaultPath, Usage: "the flow log"},
				&ucli.StringFlag{Name: "namespace", Usage: "only flows whose source or destination is in namespace `NS`"},
				&ucli.StringFlag{Name: "pod", Usage: "only flows from or to this pod, `NS/NAME` (or NAME in any namespace)"},
				&ucli.StringFlag{Name: "verdict", Usage: "only this `VERDICT`: allow, deny, staged-allow, staged-deny, suppressed"},
				&ucli.StringFlag{Name: "policy", Usage: "only flows this policy decided (or isolated), `NAME` or NS/NAME"},
			},
			action: runFlows,
		}.command(),
		cleanupCommand(),
		{
			Name:  "gc",
			Usage: "remove what pods that are gone left behind: records, reservations, host veths, masquerade entries, port mappings",
			UsageText: "cnibox gc [--dry-run] [--data-dir DIR] [--cache-dir DIR] [--json]\n\n" +
				"Reconciles the store and the kernel with reality, without a runtime's help:\n" +
				"  - endpoint records whose netns is gone or that predate the last reboot, with their host veth,\n" +
				"    masquerade entries and address reservations;\n" +
				"  - reservations without an endpoint record, when reserved before the last reboot or when the\n" +
				"    runtime's libcni cache says their netns is gone (host-local alone reserves without a record,\n" +
				"    so a reservation is never released on absence of a record alone);\n" +
				"  - host veths named cbx* and masquerade entries that nothing live or reserved accounts for;\n" +
				"  - portmap, tuning, bandwidth (with its ifb) and flannel/multi delegate records whose attachment\n" +
				"    is gone (its netns, its endpoint's netns, the container's netns, or an earlier boot), with\n" +
				"    their port mappings; port mapping elements that no record, endpoint or cache entry explains;\n" +
				"    cbw* ifb devices that no bandwidth record names;\n" +
				"  - endpoint records and reservations of an ADD that never completed: older than 10 minutes,\n" +
				"    and no entry of their container in the runtime's libcni cache (--cache-dir) while it holds\n" +
				"    others (a failed ADD whose DEL stopped at a plugin before theirs: --cache-dir '' keeps them).\n" +
				"Example: cnibox gc --dry-run",
			Flags: []ucli.Flag{
				&ucli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "print what would be removed, remove nothing"},
				dataDirFlag,
				cacheFlag,
				jsonFlag,
			},
			Action: withHost(o.runNodeGC),
		},
		{
			Name:  "doctor",
			Usage: "run the checks an expert would, one line each, pass or fail with the fix",
			UsageText: "cnibox doctor [--pod NS/NAME] [--conf-dir DIR] [--bin-dir DIR] [--data-dir DIR] [--json]\n" +
				"cnibox doctor --policy \"SRC DST PORT[/PROTO]\" [--data-dir DIR] [--json]\n\n" +
				"Checks the active config and its plugins, then per endpoint: netns, host veth (present, on the\n" +
				"bridge, up), pod interface, addresses and routes, the gateway answering a ping from inside the pod,\n" +
				"the bridge, IP forwarding, masquerade entries, port mappings (and route_localnet for 127.0.0.1),\n" +
				"MTUs; the overlay's peers; leftovers for gc.\n" +
				"Exits 1 when a check fails (warnings do not count).\n" +
				"Example: cnibox doctor --pod default/web-0",
			Flags: []ucli.Flag{
				&ucli.StringFlag{Name: "pod", Usage: "check only this pod's endpoints, as `NAMESPACE/NAME` (or NAME in any namespace)"},
				&ucli.StringFlag{Name: "network", Usage: "check only this network's endpoints"},
				&ucli.StringFlag{Name: "container", Usage: "check only containers whose ID starts with `ID`"},
				&ucli.StringFlag{Name: "policy", Usage: "instead of the checks, explain what the node's NetworkPolicy table does with a connection: " +
					"`\"SRC DST PORT[/PROTO]\"`, per direction the policy and rule that decide (exit 1 when dropped)"},
				confDirFlag,
				binDirFlag,
				dataDirFlag,
				cacheFlag,
				agentSocketFlag,
				&ucli.StringFlag{Name: "node-netns", Value: initNetNS, Usage: "the node's network namespace as a `PATH` (an nsfs file); " +
					"the namespace check fails when doctor runs in another one"},
				jsonFlag,
			},
			Action: withHost(o.doctorOrPolicy),
		},
		{
			Name:      "completion",
			Usage:     "print the shell completion script for bash or zsh",
			ArgsUsage: "bash|zsh",
			UsageText: "cnibox completion bash|zsh\n\n" +
				"Examples:\n" +
				"  source <(cnibox completion bash)                      # this shell\n" +
				"  cnibox completion bash > /etc/bash_completion.d/cnibox  # every new shell\n" +
				"  cnibox completion zsh > \"${fpath[1]}/_cnibox\"",
			BashComplete: completeShells,
			Action:       printCompletion,
		},
		{
			Name:  "store",
			Usage: "check the node's store file, or rebuild it from the kernel",
			UsageText: "cnibox store check|rebuild [--data-dir DIR] [options]\n\n" +
				"Example: cnibox store check || cnibox store rebuild --dry-run",
			Subcommands: []*ucli.Command{
				{
					Name:  "check",
					Usage: "read the whole store: pages, records, IPAM indexes; exit 1 on any problem",
					UsageText: "cnibox store check [--data-dir DIR] [--json]\n\n" +
						"Reads every page and record of the store file and checks the IPAM indexes against the\n" +
						"reservations. Exit 0: sound. Exit 1: problems (listed), or the file cannot be read at all;\n" +
						"then `cnibox store rebuild` makes a new one.\n" +
						"Example: cnibox store check --data-dir /var/lib/cnibox",
					Flags:  []ucli.Flag{dataDirFlag, jsonFlag},
					Action: runStoreCheck,
				},
				{
					Name:  "rebuild",
					Usage: "make a new store from the veths, namespaces and libcni cache of the node; the old file is kept aside",
					UsageText: "cnibox store rebuild [--data-dir DIR] [--conf-dir DIR] [--cache-dir DIR] [--dry-run] [--json]\n\n" +
						"For a store that cannot be read (or whose check fails). It finds every host veth of cnibox's\n" +
						"bridge role (cbx*) and its peer in the pod namespaces that exist (/run/netns/*, /proc/*/ns/net),\n" +
						"names the attachment from libcni's cache (container ID, network, pod) or, failing that, from the\n" +
						"network config that uses the veth's bridge, and records the pod's addresses as reservations and\n" +
						"the attachment as an endpoint. Attachments of other main plugins that use host-local are\n" +
						"recovered from libcni's cache when their namespace still has the interface.\n" +
						"Not recovered: sticky addresses of pods that are not running, round-robin positions, and the\n" +
						"records of the meta roles, portmap and the overlay agent (the agent writes its own again).\n" +
						"A veth with no cache entry is recorded under the container ID rebuilt-<veth>: its address stays\n" +
						"reserved until the runtime's GC or `cnibox gc` drops it; DEL of the real container cannot.\n" +
						"Example: cnibox store rebuild --dry-run",
					Flags: []ucli.Flag{dataDirFlag, confDirFlag, cacheFlag, jsonFlag,
						&ucli.BoolFlag{Name: "dry-run", Usage: "show what would be recorded; change nothing"}},
					Action: o.runStoreRebuild,
				},
			},
		},
	}
}
