package cli

import (
	"fmt"
	"io"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// `cnibox cleanup kube-proxy|services`: the two directions of moving a
// node's Services between kube-proxy and cnibox-agent --service-proxy
// (docs/deploy.md), for a node where no agent does it (a proxy-only
// agent removed, kube-proxy's DaemonSet gone).

// cleanupReport is what cleanup removed (or, with --dry-run, would).
type cleanupReport struct {
	What    string   `json:"what"` // "kube-proxy" or "services"
	DryRun  bool     `json:"dryRun"`
	Removed []string `json:"removed"`
}

// cleanupCommand is `cnibox cleanup`.
func cleanupCommand() *ucli.Command {
	dry := &ucli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "print what would be removed, remove nothing"}
	force := &ucli.BoolFlag{Name: "force", Usage: "remove even though the other proxy does not serve here (no proxy is left: new connections to Services fail, established ones may lose their NAT)"}
	return &ucli.Command{
		Name:  "cleanup",
		Usage: "remove a Service proxy's rules from the node: kube-proxy's leftovers, or cnibox-agent's services table",
		UsageText: "cnibox cleanup kube-proxy|services [--dry-run] [--force] [--json]\n\n" +
			"Moving a node between kube-proxy and cnibox-agent --service-proxy (docs/deploy.md).\n" +
			"Example: cnibox cleanup kube-proxy --dry-run",
		Subcommands: []*ucli.Command{
			{
				Name:  "kube-proxy",
				Usage: "remove what kube-proxy left, as `kube-proxy --cleanup` does: tables ip/ip6 kube-proxy and its iptables-nft KUBE-* chains",
				UsageText: "cnibox cleanup kube-proxy [--dry-run] [--force] [--json]\n\n" +
					"kube-proxy leaves its rules when it stops; they keep serving the Services as they were. Run this once kube-proxy is gone\n" +
					"from the node and cnibox-agent --service-proxy serves (cnibox inspect services): established connections keep flowing.\n" +
					"The kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY) stay; iptables-legacy and IPVS rules are not seen\n" +
					"(run kube-proxy --cleanup for those). Nothing of kube-proxy's: says so, exit 0. Without cnibox's services table on the node\n" +
					"it refuses (exit 1) unless --force: no proxy would be left.\n" +
					"Example: cnibox cleanup kube-proxy",
				Flags:  []ucli.Flag{dry, force, jsonFlag},
				Action: withHost(cleanupKubeProxy),
			},
			{
				Name:  "services",
				Usage: "remove cnibox-agent's services tables (table inet " + nft.ServicesTable + " and its shards " + nft.ServicesShardPrefix + "*), as cnibox-agent --service-proxy=false does",
				UsageText: "cnibox cleanup services [--dry-run] [--force] [--json]\n\n" +
					"The way back to kube-proxy on a node whose agent no longer runs the proxy: start kube-proxy first, stop the agent's proxy,\n" +
					"then remove the table (an agent that still runs with --service-proxy writes it again at its next sync). Without kube-proxy's\n" +
					"tables on the node it refuses (exit 1) unless --force: no proxy would be left.\n" +
					"Example: cnibox cleanup services",
				Flags:  []ucli.Flag{dry, force, jsonFlag},
				Action: withHost(cleanupServices),
			},
		},
	}
}

func cleanupKubeProxy(c *ucli.Context, host *netops.Handle) error {
	h := host.NFT()
	r := cleanupReport{What: "kube-proxy", DryRun: c.Bool("dry-run"), Removed: []string{}}
	ls, err := h.KubeProxyLeftovers()
	if err != nil {
		return err
	}
	if len(ls) > 0 && !r.DryRun {
		if _, ok, err := h.ServicesFrontendCount(); err != nil {
			return err
		} else if !ok && !c.Bool("force") {
			return noOtherProxy("kube-proxy's rules", "table inet "+nft.ServicesTable+" (cnibox-agent --service-proxy) is not on this node")
		}
		if ls, err = h.CleanupKubeProxy(); err != nil {
			return err
		}
	}
	for _, l := range ls {
		r.Removed = append(r.Removed, l.String())
	}
	return show(c, r, printCleanup, nil)
}

func cleanupServices(c *ucli.Context, host *netops.Handle) error {
	h := host.NFT()
	r := cleanupReport{What: "services", DryRun: c.Bool("dry-run"), Removed: []string{}}
	n, ok, err := h.ServicesFrontendCount()
	if err != nil {
		return err
	}
	if ok {
		// (before the removal: what the report names)
		tables, err := h.ServicesTablesIn()
		if err != nil {
			return err
		}
		shards := fmt.Sprintf("%d shard tables %s*", len(tables), nft.ServicesShardPrefix)
		if len(tables) > 0 && tables[0] == nft.ServicesTable {
			shards = fmt.Sprintf("%d shard tables %s*", len(tables)-1, nft.ServicesShardPrefix)
		}
		if !r.DryRun {
			if kp, err := h.KubeProxyTables(); err != nil {
				return err
			} else if len(kp) == 0 && !c.Bool("force") {
				return noOtherProxy("table inet "+nft.ServicesTable, "kube-proxy's tables are not on this node (start kube-proxy first)")
			}
			if err := nft.NewServices(h, nft.ServicesOptions{}).Delete(); err != nil {
				return err
			}
		}
		r.Removed = append(r.Removed, fmt.Sprintf("table inet %s (%d frontends, in %s)", nft.ServicesTable, n, shards))
	}
	return show(c, r, printCleanup, nil)
}

// noOtherProxy is cleanup's refusal to remove what (the only proxy's
// rules) while why (the other proxy is not there): the node's Services
// would have no proxy, and when the removed rules hold the namespace's
// last NAT chain of a family, the kernel unhooks NAT and established
// connections through Services lose their translation (seen in
// TestKubeProxyMigration: reset).
func noOtherProxy(what, why string) error {
	return fmt.Errorf("not removing %s: %s, so no proxy would serve the Services, and established connections may lose their NAT "+
		"(docs/deploy.md#from-kube-proxy-to-cnibox-and-back); start the other proxy first, or give --force", what, why)
}

// printCleanup prints one line per object removed, or that there was none.
func printCleanup(w io.Writer, r cleanupReport) error {
	if len(r.Removed) == 0 {
		what := "nothing of kube-proxy's on this node"
		if r.What == "services" {
			what = "no services table on this node (table inet " + nft.ServicesTable + ")"
		}
		_, err := fmt.Fprintln(w, what)
		return err
	}
	verb := "removed"
	if r.DryRun {
		verb = "would remove"
	}
	for _, s := range r.Removed {
		if _, err := fmt.Fprintln(w, verb, s); err != nil {
			return err
		}
	}
	return nil
}
