package cli

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/store"
)

// policyExplanation is `cnibox doctor --policy`'s answer: per direction,
// whether the node's NetworkPolicy table lets the connection through and
// which policy and rule decide.
type policyExplanation struct {
	Src     netip.Addr        `json:"src"`
	Dst     netip.Addr        `json:"dst"`
	Proto   string            `json:"proto"`
	Port    uint16            `json:"port"`
	Allowed bool              `json:"allowed"`
	Steps   []policyDirection `json:"directions"`
}

type policyDirection struct {
	Direction string `json:"direction"` // egress (at the source), ingress (at the destination)
	Allowed   bool   `json:"allowed"`
	// Rule is the deciding rule's ID, or "node", "pending", "isolation",
	// "" (the default).
	Rule string `json:"rule,omitempty"`
	Why  string `json:"why"`
}

// policyProto is the protocol named name (tcp, udp, sctp, any case).
func policyProto(name string) (policymodel.Protocol, bool) {
	return policymodel.ProtocolNamed(strings.ToUpper(name))
}

// parsePolicyConn reads "SRC DST PORT[/PROTO]" (TCP by default).
func parsePolicyConn(s string) (policymodel.Conn, string, error) {
	f := strings.Fields(s)
	bad := fmt.Errorf("--policy %q: want \"SRC DST PORT[/tcp|udp|sctp]\", e.g. \"10.244.1.5 10.244.2.7 80/tcp\"", s)
	if len(f) != 3 {
		return policymodel.Conn{}, "", bad
	}
	src, err1 := netip.ParseAddr(f[0])
	dst, err2 := netip.ParseAddr(f[1])
	portS, protoS, _ := strings.Cut(f[2], "/")
	if protoS == "" {
		protoS = "tcp"
	}
	proto, ok := policyProto(protoS)
	port, err3 := strconv.ParseUint(portS, 10, 16)
	if err1 != nil || err2 != nil || err3 != nil || !ok || src.Is4() != dst.Is4() {
		return policymodel.Conn{}, "", bad
	}
	return policymodel.Conn{Src: src.Unmap(), Dst: dst.Unmap(), Proto: proto, Port: uint16(port)}, strings.ToUpper(protoS), nil
}

// doctorOrPolicy is doctor's action: the checks, or with --policy the
// explanation.
func (o Options) doctorOrPolicy(c *ucli.Context, host *netops.Handle) error {
	if c.String("policy") != "" {
		return doctorPolicy(c, host)
	}
	return o.runDoctor(c, host)
}

// doctorPolicy explains a connection's fate in the node's policy table.
func doctorPolicy(c *ucli.Context, host *netops.Handle) error {
	conn, proto, err := parsePolicyConn(c.String("policy"))
	if err != nil {
		return err
	}
	var idx store.PolicyIndex
	var found bool
	if err := readStore(c, func(st *store.Store) error {
		idx, found, err = st.PolicyIndex()
		return err
	}); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no policy index in the store: cnibox-agent with --network-policy has not run on this node")
	}
	if idx.Rules == nil {
		return fmt.Errorf("the store's policy index has no rules: an older cnibox-agent wrote it; the agent rewrites it when it starts")
	}
	sets, err := host.NFT().PolicyMembership()
	if err != nil {
		return err
	}
	x := policyExplanation{Src: conn.Src, Dst: conn.Dst, Proto: proto, Port: conn.Port, Allowed: true}
	for _, dir := range []policymodel.Direction{policymodel.Egress, policymodel.Ingress} {
		d, err := explainPolicy(idx.Rules, sets, dir, conn)
		if err != nil {
			return err
		}
		x.Allowed = x.Allowed && d.Allowed
		x.Steps = append(x.Steps, d)
	}
	return show(c, x, printPolicyExplanation, func(x policyExplanation) bool { return !x.Allowed })
}

// explainPolicy is one direction's answer: the table's pending set first
// (a pod the agent has not placed: dropped, but for the node's own
// traffic), then the stored rules evaluated over the table's sets.
func explainPolicy(rules *policymodel.Rules, sets policymodel.Membership, dir policymodel.Direction, c policymodel.Conn) (policyDirection, error) {
	v, err := rules.Evaluate(dir, c, sets)
	if err != nil {
		return policyDirection{}, err
	}
	d := policyDirection{Direction: dir.String(), Allowed: v.Allowed, Rule: string(v.Rule)}
	self := c.Dst
	if dir == policymodel.Egress {
		self = c.Src
	}
	if v.Rule != policymodel.RuleNode {
		pending, err := sets.Has(nft.PolicyPending, policymodel.AddrElem(self))
		if err != nil {
			return policyDirection{}, err
		}
		if pending {
			d.Allowed, d.Rule = false, "pending"
		}
	}
	switch {
	case d.Rule == "node":
		d.Why = "the node's own traffic to its pods is always allowed"
	case d.Rule == "pending":
		d.Why = "the pod is pending: its ADD came before the agent placed it (cnibox inspect policy POD)"
	case d.Rule == "" && d.Allowed:
		d.Why = "no policy rule decides: allowed by default"
	case d.Rule == "":
		d.Rule = "isolation"
		d.Why = "NetworkPolicies select the pod in this direction and none of their rules allows this"
	default:
		d.Why = "decided by this rule"
	}
	return d, nil
}

func printPolicyExplanation(w io.Writer, x policyExplanation) error {
	verdict := map[bool]string{true: "allowed", false: "dropped"}
	fmt.Fprintf(w, "%s -> %s %s/%d: %s\n", x.Src, x.Dst, x.Proto, x.Port, verdict[x.Allowed])
	for _, d := range x.Steps {
		rule := ""
		if d.Rule != "" && d.Rule != "node" && d.Rule != "pending" && d.Rule != "isolation" {
			rule = " by " + d.Rule
		}
		if _, err := fmt.Fprintf(w, "  %-7s %s%s: %s\n", d.Direction, verdict[d.Allowed], rule, d.Why); err != nil {
			return err
		}
	}
	// What the rules would do; the flow log says what they did.
	_, err := fmt.Fprintln(w, "what the rules did with such connections: cnibox flows --verdict deny (or allow), with the flow log on (docs/flowlog.md)")
	return err
}
