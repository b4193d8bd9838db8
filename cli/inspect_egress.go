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
	return inspectView(c, (*store.Store).Egress, func(st *store.EgressState) { st.Gateways = []store.EgressGateway{} }, printEgress)
}

// printEgress prints one row per address of each gateway.
func printEgress(w io.Writer, st store.EgressState) error {
	if st.Node == "" {
		_, err := fmt.Fprintln(w, "no egress gateways recorded: cnibox-agent (--kube-subnet-mgr) serves them once deploy/kubernetes/egressgateway-crd.yaml is applied (docs/egress.md)")
		return err
	}
	printViewHead(w, st.Node, st.Uplink, st.Takeovers, st.Updated)
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
