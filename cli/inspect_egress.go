package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// inspectEgress shows the node's egress gateways as cnibox-agent last
// recorded them: each address, its holder, this node's part, its pods.
func inspectEgress(c *ucli.Context) error {
	var st store.EgressState
	var found bool
	if err := readStore(c, func(s *store.Store) (err error) {
		st, found, err = s.Egress()
		return err
	}); err != nil {
		return err
	}
	if !found {
		st.Gateways = []store.EgressGateway{}
	}
	return show(c, st, printEgress, nil)
}

// printEgress prints one row per address of each gateway.
func printEgress(w io.Writer, st store.EgressState) error {
	if st.Node == "" {
		_, err := fmt.Fprintln(w, "no egress gateways recorded: cnibox-agent (--kube-subnet-mgr) serves them once deploy/kubernetes/egressgateway-crd.yaml is applied (docs/egress.md)")
		return err
	}
	fmt.Fprintf(w, "node %s, uplink %s, %d takeovers since the agent started, as of %s\n\n", st.Node, st.Uplink, st.Takeovers, st.Updated.Local().Format("2006-01-02 15:04:05"))
	tw := newTable(w)
	row(tw, "GATEWAY", "READY", "EGRESS IP", "HOLDER", "THIS NODE", "PODS", "PODS HERE")
	for _, g := range st.Gateways {
		for _, ip := range g.IPs {
			here := "not eligible"
			switch {
			case ip.Holder == st.Node:
				here = "holds it"
			case ip.Eligible:
				here = "eligible, rank " + strconv.Itoa(ip.Rank)
			}
			row(tw, g.Name, strconv.FormatBool(g.Ready), ip.IP.String(), orDash(ip.Holder), here, strconv.Itoa(ip.Pods), orDash(strings.Join(ip.LocalPods, ",")))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range st.Gateways {
		if !g.Ready {
			fmt.Fprintf(w, "\n%s: %s: %s\n", g.Name, g.Reason, g.Message)
		}
	}
	return nil
}
