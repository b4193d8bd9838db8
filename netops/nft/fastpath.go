package nft

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/internal/ifname"
)

// The fast path (issue 53): a connection that has carried After packets
// through the node's forward hook, every chain of it accepting, goes into
// an nftables flowtable, and its later packets are forwarded from the
// ingress hook of the device they arrive on (the pods' bridge, the
// overlay's device, the uplink) without routing, conntrack or the forward
// and postrouting chains: the table
//
//	table inet cnibox-fastpath {
//		flowtable ft { hook ingress priority filter; devices = { cni0, flannel.1, eth0 } }
//		set devs { type ifname; elements = { "cni0", "flannel.1", "eth0" } }
//		chain forward {
//			type filter hook forward priority filter + 10; policy accept;
//			iifname "cni0" oifname "cni0" return        # one per device: bridged, not routed
//			iifname @devs oifname @devs ct state established ct packets > 20 jump offload
//		}
//		chain offload { flow add @ft }
//	}
//
// Priority filter + 10 puts the chain after the policy table's (-1, 0)
// and iptables' filter FORWARD (0): a packet reaches it only if they all
// accepted it, so a connection the rules deny is never offloaded.
//
// What the flowtable bypasses includes the policy table's chains, and
// docs/policy.md promises that a change decides an established connection
// at its next packet. So every transaction on the policy table (each new
// generation of its verdict cache, policy_gen.go) also resets the fast
// path in the same batch (queueFastPathReset): the offload rule flushed,
// the flowtable deleted and made again with the same devices, the rule
// back. Deleting a flowtable unhooks it at the commit and tears down its
// flows (they go back to conntrack's slow path, where the verdict cache's
// generation is stale and the rules decide their next packet); the new one
// starts empty. A connection the new rules allow is offloaded again after
// its next After packets.
//
// A pod's DEL needs no reset: removing its veth from the node (or the
// namespace's removal doing it) makes the kernel flush the namespace's
// IPv4 route cache and renumber IPv6's routes (fib_disable_ip,
// rt6_sync_down_dev), which makes every route a flowtable entry holds
// stale, and a flow with a stale route leaves the flowtable at its next
// packet (nf_flow_offload_ip_hook's dst check). So a new pod that gets a
// deleted pod's address, pending until the agent places it, meets the
// old connections' packets on the slow path, where the pending set drops
// them (agent/policynft's TestPolicyFastPathDeletedPod).
//
// Bridged traffic (two pods of one bridge: br_netfilter runs the forward
// hook with the bridge as both devices) is not routed and a flowtable
// cannot forward it; the per-device return keeps it out.
const (
	// FastPathTable is the name of the fast path's inet table.
	FastPathTable    = "cnibox-fastpath"
	fastPathFT       = "ft"
	fastPathChain    = "forward"
	fastPathOffload  = "offload"
	fastPathDevs     = "devs"
	fastPathLabel    = "cnibox fast path"
	fastPathPriority = 10 // *nftables.ChainPriorityFilter + 10

	// DefaultFastPathAfter is FastPathSpec.After's default: kindnet's
	// threshold. A short connection (a request and its answer) is not
	// worth a flowtable entry, and a connection's first packets are the
	// ones the rules judge.
	DefaultFastPathAfter = 20
)

// ErrNoFlowtable is wrapped by EnsureFastPath's error on a kernel without
// nftables flowtables (CONFIG_NF_FLOW_TABLE, module nf_flow_table_inet),
// with unix.EOPNOTSUPP.
var ErrNoFlowtable = errors.New("this kernel has no nftables flowtables (CONFIG_NF_FLOW_TABLE)")

// FastPathSpec is what the fast path's table holds.
type FastPathSpec struct {
	// Devices are the interfaces whose ingress the flowtable hooks; each
	// must exist. A connection is offloaded only between two of them.
	Devices []string
	// After is the number of packets (both directions) a connection
	// carries before it is offloaded; 0 is DefaultFastPathAfter.
	After uint64
}

func fastPathTableObj() *nftables.Table {
	return &nftables.Table{Name: FastPathTable, Family: nftables.TableFamilyINet}
}

// norm is s with its devices sorted, each once, and After set.
func (s FastPathSpec) norm() (FastPathSpec, error) {
	devs := slices.Clone(s.Devices)
	slices.Sort(devs)
	devs = slices.Compact(devs)
	for _, d := range devs {
		if err := ifname.Check("fast path device", d); err != nil {
			return s, err
		}
	}
	if s.After == 0 {
		s.After = DefaultFastPathAfter
	}
	s.Devices = devs
	return s, nil
}

// flowtable is the flowtable of devs.
func fastPathFlowtable(devs []string) *nftables.Flowtable {
	return &nftables.Flowtable{
		Table:    fastPathTableObj(),
		Name:     fastPathFT,
		Hooknum:  nftables.FlowtableHookIngress,
		Priority: nftables.FlowtablePriorityFilter,
		Devices:  devs,
	}
}

// fastPathRules are the forward chain's rules for s (normalised), each
// with a comment that says what it does.
func fastPathRules(s FastPathSpec) []*nftables.Rule {
	var rules []*nftables.Rule
	rule := func(comment string, exprs ...expr.Any) {
		rules = append(rules, &nftables.Rule{Exprs: exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, comment)})
	}
	for _, d := range s.Devices {
		rule(fmt.Sprintf("%s: in and out %s (bridged): return", fastPathLabel, d),
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameKey(d)},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameKey(d)},
			&expr.Verdict{Kind: expr.VerdictReturn})
	}
	// ct packets is a host-order 64-bit counter and cmp compares bytes:
	// turned big-endian first, as nft does for a relational compare.
	after := binaryutil.BigEndian.PutUint64(s.After)
	rule(fmt.Sprintf("%s: between @%s, established, after %d packets: offload", fastPathLabel, fastPathDevs, s.After),
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: fastPathDevs},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: fastPathDevs},
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Ct{Key: expr.CtKeyPKTS, Register: 1},
		&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 8, Size: 8},
		&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: after},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: fastPathOffload})
	return rules
}

// offloadRule is the offload chain's one rule.
func offloadRule() *nftables.Rule {
	return &nftables.Rule{
		Table:    fastPathTableObj(),
		Chain:    &nftables.Chain{Name: fastPathOffload, Table: fastPathTableObj()},
		Exprs:    []expr.Any{&expr.FlowOffload{Name: fastPathFT}},
		UserData: userdata.AppendString(nil, userdata.TypeComment, fastPathLabel+": flow add @"+fastPathFT),
	}
}

// EnsureFastPath makes the fast path's table hold s: when it differs (or
// is gone) the difference is committed in one transaction (reconcile);
// changed reports that. Other devices replace the table, which also
// empties the flowtable (a flowtable's devices cannot change while a rule
// refers to it); another threshold rewrites the forward chain only. No
// Devices deletes the table. A kernel without flowtables gives an error
// wrapping ErrNoFlowtable.
func (h *Handle) EnsureFastPath(s FastPathSpec) (changed bool, err error) {
	s, err = s.norm()
	if err != nil {
		return false, fmt.Errorf("ensure fast path: %w", err)
	}
	if len(s.Devices) == 0 {
		return h.dropIfThere(fastPathTableObj(), fastPathChain)
	}
	changed, err = h.reconcile(fastPathTable{s}.spec())
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || (errors.Is(err, unix.ENOENT) && !h.hasFlowtables()) {
			err = fmt.Errorf("%w (%w): %w", ErrNoFlowtable, unix.EOPNOTSUPP, err)
		}
		return false, fmt.Errorf("ensure fast path (%v) in %s: %w", s.Devices, h.where(), classify(err))
	}
	return changed, nil
}

// fastPathTable is the fast path's table as its spec (normalised) says.
type fastPathTable struct{ FastPathSpec }

// spec is the table: the devices' set, the flowtable, the forward chain
// and the offload chain.
func (f fastPathTable) spec() *tableSpec {
	return &tableSpec{table: fastPathTableObj(), owned: true, what: "fast path",
		sets:       []setSpec{{set: &nftables.Set{Name: fastPathDevs, KeyType: nftables.TypeIFName}, elems: ifnameElems(f.Devices)}},
		flowtables: []*nftables.Flowtable{fastPathFlowtable(f.Devices)},
		chains: []chainSpec{
			{name: fastPathOffload, rules: []*nftables.Rule{offloadRule()}},
			baseChain(fastPathChain, nftables.ChainTypeFilter, *nftables.ChainHookForward, fastPathPriority, fastPathRules(f.FastPathSpec)),
		},
	}
}

// hasFlowtables reports whether the kernel makes a flowtable without
// devices (in a table of its own, removed again): what tells a kernel
// without flowtables from a device that does not exist, both ENOENT.
func (h *Handle) hasFlowtables() bool {
	t, err := h.begin()
	if err != nil {
		return false
	}
	c := t.conn()
	probe := &nftables.Table{Name: FastPathTable + "-probe", Family: nftables.TableFamilyINet}
	dropTable(c, probe)
	c.AddTable(probe)
	c.AddFlowtable(&nftables.Flowtable{Table: probe, Name: fastPathFT, Hooknum: nftables.FlowtableHookIngress,
		Priority: nftables.FlowtablePriorityFilter})
	c.DelTable(probe)
	return t.commit() == nil
}

// ifnameElems are the elements of a set of interface names.
func ifnameElems(names []string) []nftables.SetElement {
	out := make([]nftables.SetElement, len(names))
	for i, n := range names {
		out[i] = nftables.SetElement{Key: ifnameKey(n)}
	}
	return out
}

// fastPathDevices are the devices of the flowtable, sorted; nil, nil when
// the table or the flowtable is not there. The kernel drops a device that
// goes away from a flowtable: this is what it hooks now.
func (h *Handle) fastPathDevices() ([]string, error) {
	fts, err := consistently(h, func() ([]*nftables.Flowtable, error) { return h.nft.ListFlowtables(fastPathTableObj()) })
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("list fast path flowtable in %s: %w", h.where(), err)
	}
	for _, ft := range fts {
		if ft.Name == fastPathFT {
			devs := slices.Clone(ft.Devices)
			slices.Sort(devs)
			if devs == nil {
				devs = []string{}
			}
			return devs, nil
		}
	}
	return nil, nil
}

// queueFastPathReset queues on t, when the fast path's flowtable exists,
// the flush of its offload chain, the flowtable's deletion and its making
// again with the devices it has, and the offload rule back: every
// offloaded connection goes back to the slow path at the commit, where the
// forward hook's chains decide its next packet. Nothing when there is no
// fast path (queued false).
func (t *txn) queueFastPathReset() (queued bool, err error) {
	devs, err := t.h.fastPathDevices()
	if err != nil || devs == nil {
		return false, err
	}
	c := t.conn()
	table := fastPathTableObj()
	c.FlushChain(&nftables.Chain{Name: fastPathOffload, Table: table})
	c.DelFlowtable(fastPathFlowtable(nil))
	c.AddFlowtable(fastPathFlowtable(devs))
	c.AddRule(offloadRule())
	return true, nil
}

// ResetFastPath takes every connection out of the fast path (one
// transaction; nothing when there is none), as a policy change does
// (queueFastPathReset).
func (h *Handle) ResetFastPath() error {
	t, err := h.begin()
	if err != nil {
		return err
	}
	if queued, err := t.queueFastPathReset(); err != nil || !queued {
		if err != nil {
			return fmt.Errorf("reset fast path in %s: %w", h.where(), err)
		}
		return nil
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("reset fast path in %s: %w", h.where(), classify(err))
	}
	return nil
}

// FastPath reports the fast path as the kernel has it: the flowtable's
// devices and the forward chain's rules' comments; nil, nil, nil when the
// table is not there.
func (h *Handle) FastPath() (devices, rules []string, err error) {
	if _, err := h.nftConn(); err != nil {
		return nil, nil, err
	}
	devices, err = h.fastPathDevices()
	if err != nil {
		return nil, nil, err
	}
	rules, err = h.chainComments(fastPathTableObj(), fastPathChain)
	if err != nil {
		return nil, nil, fmt.Errorf("list fast path rules in %s: %w", h.where(), err)
	}
	return devices, rules, nil
}

// DeleteFastPath removes the fast path's table (its flowtable's
// connections go back to the slow path). A missing table is not an error.
func (h *Handle) DeleteFastPath() error {
	if err := h.deleteTable(fastPathTableObj()); err != nil {
		return fmt.Errorf("delete fast path in %s: %w", h.where(), err)
	}
	return nil
}
