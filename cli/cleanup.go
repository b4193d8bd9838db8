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
	return &ucli.Command{
		Name:  "cleanup",
		Usage: "remove a Service proxy's rules from the node: kube-proxy's leftovers, or cnibox-agent's services table",
		UsageText: "cnibox cleanup kube-proxy|services [--dry-run] [--json]\n\n" +
			"Moving a node between kube-proxy and cnibox-agent --service-proxy (docs/deploy.md).\n" +
			"Example: cnibox cleanup kube-proxy --dry-run",
		Subcommands: []*ucli.Command{
			{
				Name:  "kube-proxy",
				Usage: "remove what kube-proxy left, as `kube-proxy --cleanup` does: tables ip/ip6 kube-proxy and its iptables-nft KUBE-* chains",
				UsageText: "cnibox cleanup kube-proxy [--dry-run] [--json]\n\n" +
					"kube-proxy leaves its rules when it stops; they keep serving the Services as they were. Run this once kube-proxy is gone\n" +
					"from the node and cnibox-agent --service-proxy serves (cnibox inspect services): established connections keep flowing.\n" +
					"The kubelet's chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY) stay; iptables-legacy and IPVS rules are not seen\n" +
					"(run kube-proxy --cleanup for those). Nothing of kube-proxy's: says so, exit 0.\n" +
					"Example: cnibox cleanup kube-proxy",
				Flags:  []ucli.Flag{dry, jsonFlag},
				Action: withHost(cleanupKubeProxy),
			},
			{
				Name:  "services",
				Usage: "remove cnibox-agent's services table (table inet " + nft.ServicesTable + "), as cnibox-agent --service-proxy=false does",
				UsageText: "cnibox cleanup services [--dry-run] [--json]\n\n" +
					"The way back to kube-proxy on a node whose agent no longer runs the proxy: start kube-proxy first, stop the agent's proxy,\n" +
					"then remove the table (an agent that still runs with --service-proxy writes it again at its next sync).\n" +
					"Example: cnibox cleanup services",
				Flags:  []ucli.Flag{dry, jsonFlag},
				Action: withHost(cleanupServices),
			},
		},
	}
}

func cleanupKubeProxy(c *ucli.Context, host *netops.Handle) error {
	h := host.NFT()
	r := cleanupReport{What: "kube-proxy", DryRun: c.Bool("dry-run"), Removed: []string{}}
	ls, err := h.KubeProxyLeftovers()
	if err == nil && !r.DryRun {
		ls, err = h.CleanupKubeProxy()
	}
	if err != nil {
		return err
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
		if !r.DryRun {
			if err := nft.NewServices(h, nft.ServicesOptions{}).Delete(); err != nil {
				return err
			}
		}
		r.Removed = append(r.Removed, fmt.Sprintf("table inet %s (%d frontends)", nft.ServicesTable, n))
	}
	return show(c, r, printCleanup, nil)
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
