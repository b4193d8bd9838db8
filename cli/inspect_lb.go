package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// inspectLB shows the cluster's LoadBalancer addresses as cnibox-agent
// (--lb-announce) last recorded them on this node: the pools (size, used,
// free), each address with its Services and the node announcing it.
func inspectLB(c *ucli.Context) error {
	return inspectView(c, (*store.Store).LB, func(st *store.LBState) { st.Pools, st.Addresses = []store.LBPool{}, []store.LBAddress{} }, printLB)
}

// printLB prints the pools, then one row per address.
func printLB(w io.Writer, st store.LBState) error {
	if st.Node == "" {
		_, err := fmt.Fprintln(w, "no load balancer addresses recorded: cnibox-agent --lb-announce records them once deploy/kubernetes/loadbalancerippool-crd.yaml is applied (docs/loadbalancer.md)")
		return err
	}
	printViewHead(w, st.Node, st.Uplink, st.Takeovers, st.Updated)
	tw := newTable(w)
	row(tw, "POOL", "SIZE", "USED", "FREE", "STATE")
	for _, p := range st.Pools {
		state := "in use"
		switch {
		case p.Conflict != "":
			state = "conflict: " + p.Conflict
		case p.Disabled:
			state = "disabled (its addresses stay announced)"
		}
		row(tw, p.Name, poolCount(p.Total), strconv.Itoa(p.Used), poolCount(p.Total-float64(p.Used)), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "ADDRESS", "POOL", "SERVICES", "TRAFFIC POLICY", "ANNOUNCED BY", "THIS NODE")
	for _, a := range st.Addresses {
		here := "may not announce it"
		switch {
		case a.Holder == st.Node:
			here = "announces it"
		case a.Eligible:
			here = "may, rank " + strconv.Itoa(a.Rank)
		}
		policy := "Cluster"
		if a.Local {
			policy = "Local"
		}
		row(tw, a.IP.String(), orDash(a.Pool), strings.Join(a.Services, ","), policy, orDash(a.Holder), here)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range st.Addresses {
		if a.Why != "" {
			fmt.Fprintf(w, "\n%s: not announced: %s\n", a.IP, a.Why)
		}
	}
	return nil
}

// poolCount prints a pool's count (a float: an IPv6 pool may hold more than
// 2^64), whole below 2^53, else as a power of two.
func poolCount(n float64) string {
	if n < 1<<53 {
		return strconv.FormatFloat(n, 'f', 0, 64)
	}
	return fmt.Sprintf("~2^%.0f", math.Log2(n))
}
