package cli

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
)

// servicesReport is what `cnibox inspect services` shows: the node's
// services table (cnibox-agent --service-proxy) as the kernel holds it,
// one frontend each with the endpoints its traffic goes to.
type servicesReport struct {
	Table         bool                  `json:"table"` // the node has the services table
	NodePortAddrs []netip.Addr          `json:"nodePortAddrs"`
	Frontends     []nft.ServiceFrontend `json:"frontends"`
}

// noServicesTable is what inspect services says on a node without the
// table: an ordinary node (kube-proxy, if any, serves its Services), so
// it exits 0.
const noServicesTable = "no services table on this node: cnibox-agent --service-proxy is not running here (docs/services.md)"

func inspectServices(c *ucli.Context, host *netops.Handle) error {
	v, err := host.NFT().ReadServices()
	if err != nil {
		return err
	}
	r := servicesReport{NodePortAddrs: []netip.Addr{}, Frontends: []nft.ServiceFrontend{}}
	if v != nil {
		r.Table, r.NodePortAddrs, r.Frontends = true, v.NodePortAddrs, v.Frontends
	}
	return show(c, r, printServices, nil)
}

// printServices prints one row per frontend: where it is reached, what
// its traffic is DNATed to, and how.
func printServices(w io.Writer, r servicesReport) error {
	if !r.Table {
		_, err := fmt.Fprintln(w, noServicesTable)
		return err
	}
	tw := newTable(w)
	row(tw, "SERVICE", "KIND", "PROTO", "FRONTEND", "ENDPOINTS", "AFFINITY", "MASQUERADE")
	for _, fe := range r.Frontends {
		front := netip.AddrPortFrom(fe.Addr, fe.Port).String()
		if fe.Kind == "NodePort" {
			front = fmt.Sprintf("nodeports%d:%d", fe.Family, fe.Port)
		}
		if fe.SourceRanges {
			front += " (source ranges)"
		}
		eps := joinStrings(fe.Endpoints)
		switch {
		case fe.NoEndpoints != "":
			eps = "none: " + fe.NoEndpoints
		case fe.Slots > 0:
			eps += fmt.Sprintf(" (%d slots)", fe.Slots)
		}
		aff := "-"
		if fe.Affinity > 0 {
			aff = "ClientIP " + fe.Affinity.String()
		}
		row(tw, fe.Service, fe.Kind, fe.Protocol, front, eps, aff, orDash(fe.Masquerade))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.NodePortAddrs) > 0 {
		var a4, a6 []string
		for _, a := range r.NodePortAddrs {
			if a.Is4() {
				a4 = append(a4, a.String())
			} else {
				a6 = append(a6, a.String())
			}
		}
		_, err := fmt.Fprintf(w, "nodeports4: %s; nodeports6: %s\n", orDash(strings.Join(a4, " ")), orDash(strings.Join(a6, " ")))
		return err
	}
	return nil
}
