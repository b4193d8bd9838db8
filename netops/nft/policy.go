package nft

import (
	"fmt"
	"net/netip"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The NetworkPolicy table. cnibox-agent's policy engine (agent/policy)
// resolves the policies of a node to tiers of rules over address sets, in
// the vocabulary of internal/policymodel; this file and policy_*.go render
// that vocabulary, as it is, into one table, written in one transaction per
// change:
//
//	table inet cnibox-policy {
//		set <set>-4 / <set>-6   # per model set and family: ipv4_addr (pods),
//		                        # interval (CIDRs), ipv4_addr . inet_proto .
//		                        # inet_service (named ports)
//		set pending-4 / -6      # pods the agent has not resolved yet
//		counter <rule>          # one per policy rule; iso-in, iso-eg, pending, invalid
//		chain forward { type filter hook forward priority -1;
//			meta nfproto ipv4 jump fwd4; meta nfproto ipv6 jump fwd6 }
//		chain input   { type filter hook input priority -1;   # a pod to the node
//			meta nfproto ipv4 jump input4; ... }
//		chain fwd4 {
//			ct state invalid counter name invalid drop   # policy_entry.go
//			ct state untracked goto fwd4u   # the untracked twin: packet fields
//			ct mark & 0xfffff000 @gen-f accept # both allowed at this generation
//			ct original saddr @pending-4 counter name pending drop
//			ct reply saddr @pending-4 counter name pending drop
//			ct mark & 0xfffff000 @gen accept   # the same, once an ADD emptied gen-f
//			goto egress4                # the egress walk, then the ingress walk
//		}
//		chain input4 { the same without the reply's pending check, the
//			invalid drop for the attached pods only (policy_entry.go) }
//		chain egress4 {
//			jump a-<policy>-eg4         # Admin tier: a goto chain of policies
//			self @<isolated>-4 jump np-eg4   # NetworkPolicy tier
//			self @<isolated>-4 counter name iso-eg drop
//			jump b-<policy>-eg4         # Baseline tier
//			goto allow-eg4              # the default
//		}
//		chain a-<policy>-eg4 {
//			self != @<subject>-4 goto a-<next>-eg4
//			<peer, ports, named ports> counter name <rule> goto allow-eg4|drop|return
//			goto a-<next>-eg4
//		}
//		chain np-eg4 { self @<subject>-4 jump n-<policy>-eg4 ... }
//		chain n-<policy>-eg4 { <match> counter name <rule> goto allow-eg4 ... }
//		chain allow-eg4 { <mark: egress allowed>; goto ingress4 }
//		(ingress4 likewise, its allow goto allow-in, which marks and
//		accepts; the node's own addresses have no accept: its own traffic
//		never meets the forward hook, see render)
//		sets gen, gen-f, gen-e, maps mark-eg, mark-in   # the verdict cache (policy_gen.go)
//		chain fwd4u, input4u, egress4u, n-<policy>-eg4u, ...   # each walk
//			chain's twin for untracked packets (policy_entry.go)
//	}
//
// A connection is judged by its conntrack tuple, both directions: self and
// peer are the original source and the reply's source (the destination
// after DNAT), the port the reply's source port, so replies need no rule of
// their own. Its first packet after each change of the table walks the
// rules; the verdict cache accepts the packets after it on one compare
// until the next change, so a change applies to established connections
// at their next packet, the same for every protocol (docs/policy.md). Pods
// coming and going change set elements only (and the cache's generation).

// PolicyTable is the name of the policy table (family inet).
const PolicyTable = "cnibox-policy"

// PolicyPending is the set of the addresses of pods whose place in the
// sets the agent has not computed yet: everything to and from them is
// dropped but the node's own traffic to them.
const PolicyPending = policymodel.CounterPending

// PolicyChange is one transaction on the policy table.
type PolicyChange struct {
	// Full replaces everything: the rules, every set in Sets (elements
	// replaced), and every other set, chain and counter of the table but
	// the pending set is deleted. Rules must be set.
	Full bool
	// Rules, when not nil, replaces the rules (chains flushed and
	// rewritten; counters of rules that are gone deleted). A policy's
	// chains are named by policymodel.ShortID of its ID, a rule's counter
	// "c-" and ShortID of its.
	Rules *policymodel.Rules
	// Sets are created, or their elements replaced if they exist; the
	// set's Key is its comment.
	Sets []*policymodel.Set
	// Add and Del hold, per existing set, the elements added to and
	// removed from it (ID and Kind are the model set's).
	Add, Del []*policymodel.Set
	// DelSets are deleted last, when no rule uses them.
	DelSets []policymodel.SetID
	// Guard, when not nil, replaces the guard set (policy_pending.go).
	Guard *PolicyGuard
	// Resolved are removed from the pending set (those not in it are
	// ignored).
	Resolved []netip.Addr
	// ToPending are addresses of the node's pods that the model no
	// longer places (gone from the API, done): put in the pending set by
	// this transaction (closed to everything but the node), then taken
	// out unless still attached (policy_pending.go). A full sync puts
	// every attached address that is not Resolved there. Resolved wins
	// over ToPending.
	ToPending []netip.Addr
}

// ApplyPolicy applies c to the policy table in one transaction: it is
// applied whole or not at all.
func (h *Handle) ApplyPolicy(c *PolicyChange) error {
	if c.Full && c.Rules == nil {
		return fmt.Errorf("apply network policy: a full sync without rules")
	}
	if err := h.applyPolicy(c); err != nil {
		return fmt.Errorf("apply network policy in %s: %w", h.where(), classify(err))
	}
	return nil
}

// DeletePolicy removes the policy table (the agent's flag turned off).
func (h *Handle) DeletePolicy() error {
	t, err := h.begin()
	if err != nil {
		return err
	}
	if tb, _ := h.nft.ListTableOfFamily(PolicyTable, policyFamily); tb == nil {
		return nil
	}
	t.conn().DelTable(policyTableObj())
	policyOf(h).forget()
	if err := t.commit(); err != nil {
		return fmt.Errorf("delete the policy table in %s: %w", h.where(), classify(err))
	}
	return nil
}
