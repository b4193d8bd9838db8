package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// policyReport is what `cnibox inspect policy` shows: the policies of the
// node's NetworkPolicy table (those that select POD when one is named),
// each rule with its packet counter.
type policyReport struct {
	Table   bool         `json:"table"` // the node has the policy table
	Pod     string       `json:"pod,omitempty"`
	Addrs   []netip.Addr `json:"addrs,omitempty"`
	Pending bool         `json:"pending,omitempty"` // closed until the agent places it
	// Isolated lists the directions in which a NetworkPolicy isolates POD.
	Isolated []string         `json:"isolated,omitempty"`
	Policies []policyRuleView `json:"policies"`
}

type policyRuleView struct {
	Direction string `json:"direction"`
	Tier      string `json:"tier"`
	Policy    string `json:"policy"`
	Rule      string `json:"rule"`
	Name      string `json:"name,omitempty"`
	Action    string `json:"action"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
}

func inspectPolicy(c *ucli.Context, host *netops.Handle) error {
	r := policyReport{Pod: c.Args().First(), Policies: []policyRuleView{}}
	var idx store.PolicyIndex
	var eps []store.Endpoint
	err := readStore(c, func(st *store.Store) error {
		var err error
		if idx, _, err = st.PolicyIndex(); err != nil {
			return err
		}
		if r.Pod != "" {
			eps, err = st.Endpoints("")
		}
		return err
	})
	if err != nil {
		return err
	}
	if r.Pod != "" {
		if r.Pod, r.Addrs, err = policyPod(eps, r.Pod); err != nil {
			return err
		}
	}
	h := host.NFT()
	counters, err := h.PolicyCounters()
	if err != nil {
		return err
	}
	r.Table = len(counters) > 0
	if !r.Table { // the agent's feature absent: exit 1, as every view of the agent's (docs/cli.md)
		return errors.New("no policy table on this node: cnibox-agent --network-policy is not running here")
	}
	selects := func(set string) (bool, error) {
		if r.Pod == "" {
			return true, nil
		}
		in, _, err := h.PolicySetAddrs(set)
		return slices.ContainsFunc(r.Addrs, func(a netip.Addr) bool { return slices.Contains(in, a) }), err
	}
	if r.Pod != "" {
		if r.Pending, err = selects(nft.PolicyPending); err != nil {
			return err
		}
		for _, dir := range policyDirs {
			if idx.Rules == nil {
				break
			}
			if set := idx.Rules.Tiers(dir).Isolated; set != "" {
				if ok, err := selects(string(set)); err != nil {
					return err
				} else if ok {
					r.Isolated = append(r.Isolated, dir.String())
				}
			}
		}
	}
	if err := r.addRules(idx.Rules, counters, selects); err != nil {
		return err
	}
	return show(c, r, printPolicy, nil)
}

// policyPod finds pod, NAMESPACE/NAME or NAME in any namespace (as --pod
// takes it in flows, inspect endpoints and doctor), among the node's
// endpoint records: its full name and addresses, or an error that says
// how to name it.
func policyPod(eps []store.Endpoint, pod string) (string, []netip.Addr, error) {
	var names []string
	var addrs []netip.Addr
	for _, ep := range eps {
		if !podMatches(ep, pod) {
			continue
		}
		if n := podName(ep); !slices.Contains(names, n) {
			names = append(names, n)
		}
		for _, p := range ep.IPs {
			addrs = append(addrs, p.Addr())
		}
	}
	switch {
	case len(names) > 1:
		slices.Sort(names)
		return "", nil, fmt.Errorf("pod %q: pods of that name in %d namespaces (%s): give NAMESPACE/NAME", pod, len(names), strings.Join(names, ", "))
	case len(addrs) == 0:
		return "", nil, fmt.Errorf("pod %q: no endpoint record on this node (NAMESPACE/NAME, or NAME in any namespace; cnibox inspect endpoints lists them)", pod)
	}
	return names[0], addrs, nil
}

// policyDirs are the directions in the order inspect lists them.
var policyDirs = []policymodel.Direction{policymodel.Ingress, policymodel.Egress}

// addRules lists the rules of the policies whose subject selects the pod
// (every policy's without one), in evaluation order, with their counters.
func (r *policyReport) addRules(rules *policymodel.Rules, counters map[string]nft.PolicyCounter, selects func(string) (bool, error)) error {
	if rules == nil {
		return nil
	}
	for _, dir := range policyDirs {
		for p := range rules.Tiers(dir).Policies() {
			ok, err := selects(string(p.Subject))
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			for _, rule := range p.Rules {
				cnt := counters[policymodel.CounterName(rule.ID.Key())]
				r.Policies = append(r.Policies, policyRuleView{Direction: dir.String(), Tier: p.Tier.String(), Policy: p.ID,
					Rule: string(rule.ID), Name: rule.Name, Action: rule.Action.String(), Packets: cnt.Packets, Bytes: cnt.Bytes})
			}
		}
	}
	return nil
}

func printPolicy(w io.Writer, r policyReport) error {
	if r.Pod != "" {
		fmt.Fprintf(w, "pod %s %s: isolated %s, pending %v\n", r.Pod, joinStrings(r.Addrs), orDash(fmt.Sprint(r.Isolated)), r.Pending)
	}
	tw := newTable(w)
	row(tw, "DIRECTION", "TIER", "POLICY", "RULE", "ACTION", "PACKETS", "BYTES")
	for _, p := range r.Policies {
		rule := p.Rule
		if p.Name != "" {
			rule += " (" + p.Name + ")"
		}
		row(tw, p.Direction, p.Tier, p.Policy, rule, p.Action, fmt.Sprint(p.Packets), fmt.Sprint(p.Bytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Pod != "" {
		_, err := fmt.Fprintf(w, "the connections these rules decided: cnibox flows --pod %s (docs/flowlog.md)\n", r.Pod)
		return err
	}
	return nil
}
