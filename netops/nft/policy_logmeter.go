package nft

import (
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// The flow log's rate limits in the kernel (issue 60): per source, then
// for the node.
//
// A log rule once had one `limit rate 10000/second` of its own, which every
// pod's packets shared: one pod's flood of denied packets on iso-in spent
// it, and every other pod's denials on iso-in went unlogged (the agent
// never saw them, so its fair rate limit could not help). Now each log
// rule meters its packets by their source, the conntrack original source
// (the packet's own source for a packet without a conntrack entry), in a
// dynamic set per family, then by the node, in a one-element dynamic set
// every log rule of the table shares:
//
//	set log-src-4 { type ipv4_addr . mark; flags dynamic,timeout; size 65536; timeout 10s }
//	set log-src-6 { type ipv6_addr . mark; ... }
//	set log-node  { type mark; flags dynamic; }
//	<match> update @log-src-4 { ct original saddr . <rule tag> limit rate 2000/second burst 2000 packets }
//	        update @log-node { 0 limit rate 10000/second burst 10000 packets }
//	        log group 1717 snaplen 96 prefix "cnibox:d:iso-in"
//	<match> counter name c-iso-in drop
//
// A packet over either limit goes on to its verdict unlogged, as before.
// The tag is a hash of the rule's log prefix (its verdict and counter), so
// a source has a bucket per logging rule: its flood on iso-in spends its
// own iso-in bucket, not another source's, nor its own on other rules.
// The node's bucket bounds what every source together costs the agent.
// A source meter's entry lives 10 s past its source's last logged-rule
// packet (a bucket full again after 1 s at most: forgetting it loses
// nothing); with 65,536 entries in a family's set, a further source is not
// logged until one expires. docs/flowlog.md has the numbers' reasons.

// The dynamic sets of the log rules' meters.
const (
	policyLogSrc  = "log-src"  // per family: source . rule tag
	policyLogNode = "log-node" // the node's one bucket
)

// The meters' limits (variables: a test lowers them to make its floods
// decisive on a slow machine).
var (
	// logSourceRate is how many packets a second one source's packets on
	// one log rule are logged at most, with a burst as many.
	logSourceRate uint64 = 2000
	// logNodeRate is how many packets a second the node's log rules log
	// together at most, with a burst as many.
	logNodeRate uint64 = 10000
)

// The source meters' bounds: at most logMeterSize sources (and rules) a
// family, each forgotten logMeterTimeout after its last logged-rule packet.
const (
	logMeterSize    = 65536
	logMeterTimeout = 10 * time.Second
)

// logSnap is how much of a packet a log message carries: the IPv6 header
// and the first bytes of the transport's (its ports) with room to spare.
const logSnap = 96

// logOn reports whether l logs anything: the table then has log rules and
// their meters' sets.
func logOn(l policymodel.FlowLog) bool {
	return l.Allow.On() || l.Deny.On() || l.Staged != ""
}

// logTag is the meter tag of the log rules of prefix: a hash of it.
func logTag(prefix string) []byte {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return binary.BigEndian.AppendUint32(nil, h.Sum32())
}

// logExprs are "update @log-src-<fam> { ct original saddr . <tag> limit
// rate R/second burst R packets } update @log-node { 0 limit rate N/second
// burst N packets } log group 1717 snaplen 96 prefix <prefix>": past
// either limit the packet goes on to its verdict unlogged. The source is
// loaded as the walk's matches load addresses (a conntrack load, which
// untrackedRule turns into the packet's own source).
func (d policyDir) logExprs(prefix string) []expr.Any {
	tag := uint32(9) // the 32-bit register after the address
	if d.v6 {
		tag = 12
	}
	limit := func(rate uint64) *expr.Limit {
		return &expr.Limit{Type: expr.LimitTypePkts, Rate: rate, Unit: expr.LimitTimeSecond, Burst: uint32(rate)}
	}
	return []expr.Any{
		ctAddr(0, 8),
		&expr.Immediate{Register: tag, Data: logTag(prefix)},
		&expr.Dynset{SrcRegKey: 8, SetName: policySetName(policyLogSrc, d.v6), Operation: unix.NFT_DYNSET_OP_UPDATE,
			Timeout: logMeterTimeout, Exprs: []expr.Any{limit(logSourceRate)}},
		&expr.Immediate{Register: 8, Data: make([]byte, 4)},
		&expr.Dynset{SrcRegKey: 8, SetName: policyLogNode, Operation: unix.NFT_DYNSET_OP_UPDATE,
			Exprs: []expr.Any{limit(logNodeRate)}},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
			Group: policymodel.FlowLogGroup, Snaplen: logSnap, Data: []byte(prefix)},
	}
}

// policyLogSets are the meters' sets.
func policyLogSets() []*nftables.Set {
	tb := policyTableObj()
	out := []*nftables.Set{{Table: tb, Name: policyLogNode, KeyType: nftables.TypeMark, Dynamic: true,
		Comment: "the flow log's node-wide rate"}}
	for _, v6 := range []bool{false, true} {
		addr := nftables.TypeIPAddr
		if v6 {
			addr = nftables.TypeIP6Addr
		}
		key, _ := nftables.ConcatSetType(addr, nftables.TypeMark)
		out = append(out, &nftables.Set{Table: tb, Name: policySetName(policyLogSrc, v6), KeyType: key, Concatenation: true,
			Dynamic: true, HasTimeout: true, Timeout: logMeterTimeout, Size: logMeterSize,
			Comment: "the flow log's rate per source and rule"})
	}
	return out
}

// isPolicyLogSet reports whether name is one of the meters' sets.
func isPolicyLogSet(name string) bool {
	return name == policyLogNode || name == policySetName(policyLogSrc, false) || name == policySetName(policyLogSrc, true)
}

// queueLogSets makes the meters' sets where the rules log (before the
// rules that update them) and, where they do not, marks them for deletion
// in dels (after the rules that used them are gone).
func (t *txn) queueLogSets(l policymodel.FlowLog, st *policyState, dels map[string]bool) error {
	for _, s := range policyLogSets() {
		switch {
		case !logOn(l):
			dels[s.Name] = true
		case !st.sets[s.Name]:
			if err := t.addSet(s, nil); err != nil {
				return err
			}
			st.sets[s.Name] = true
		}
	}
	return nil
}
