package nftfake

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Conn returns a google/nftables connection on a new socket of k, for a
// test to read (or change) the table as another program would.
func (k *Kernel) Conn() (*nftables.Conn, error) {
	return nftables.New(nftables.WithTestDial(k.Dial()))
}

// SetCounter sets the named counter of table (of family) as if packets
// had hit it; false when there is no such counter.
func (k *Kernel) SetCounter(family nftables.TableFamily, table, name string, packets, bytes uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := k.w.table(uint8(family), table)
	if t == nil {
		return false
	}
	o := t.obj(name, objCounter)
	if o == nil {
		return false
	}
	o.packets, o.bytes = packets, bytes
	return true
}

// families names the NFPROTO_ values as nft does.
var families = map[uint8]string{unix.NFPROTO_INET: "inet", unix.NFPROTO_IPV4: "ip", unix.NFPROTO_IPV6: "ip6",
	unix.NFPROTO_ARP: "arp", unix.NFPROTO_BRIDGE: "bridge", unix.NFPROTO_NETDEV: "netdev"}

// String lists the ruleset in the manner of `nft list ruleset`: tables in
// the order made, each with its chains and rules (expressions as
// google/nftables decodes them), sets with their elements (hex keys and
// values) and named objects.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.w.expire(k.now())
	var b strings.Builder
	for _, t := range k.w.tables {
		fmt.Fprintf(&b, "table %s %s { # handle %d\n", families[t.family], t.name, t.handle)
		for _, s := range t.sets {
			k.writeSet(&b, s)
		}
		for _, o := range t.objs {
			if o.typ == objCounter {
				fmt.Fprintf(&b, "\tcounter %s { packets %d bytes %d } # handle %d\n", o.name, o.packets, o.bytes, o.handle)
			} else {
				fmt.Fprintf(&b, "\tobject %s type %d { %x } # handle %d\n", o.name, o.typ, o.data, o.handle)
			}
		}
		for _, c := range t.chains {
			fmt.Fprintf(&b, "\tchain %s { # handle %d\n", c.name, c.handle)
			if c.base {
				pol := map[uint32]string{nfAccept: "accept", nfDrop: "drop"}[c.policy]
				fmt.Fprintf(&b, "\t\ttype %s hook %d priority %d; policy %s;\n", c.typ, c.hooknum, c.prio, pol)
			}
			for _, r := range c.rules {
				fmt.Fprintf(&b, "\t\t%s # handle %d\n", exprText(t.family, r.exprs), r.handle)
			}
			b.WriteString("\t}\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// Table lists one table as String does, but in a canonical form two
// tables with the same content list the same: no handles, no expiry
// times, sets, objects and chains sorted by name (rules stay in order), ""
// when there is no such table.
func (k *Kernel) Table(family nftables.TableFamily, name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.w.expire(k.now())
	t := k.w.table(uint8(family), name)
	if t == nil {
		return ""
	}
	var items []string
	for _, s := range t.sets {
		var b strings.Builder
		k.writeSetOf(&b, s, false)
		items = append(items, b.String())
	}
	for _, o := range t.objs {
		if o.typ == objCounter {
			items = append(items, fmt.Sprintf("\tcounter %s { packets %d bytes %d }\n", o.name, o.packets, o.bytes))
		} else {
			items = append(items, fmt.Sprintf("\tobject %s type %d { %x }\n", o.name, o.typ, o.data))
		}
	}
	for _, c := range t.chains {
		var b strings.Builder
		fmt.Fprintf(&b, "\tchain %s {\n", c.name)
		if c.base {
			pol := map[uint32]string{nfAccept: "accept", nfDrop: "drop"}[c.policy]
			fmt.Fprintf(&b, "\t\ttype %s hook %d priority %d; policy %s;\n", c.typ, c.hooknum, c.prio, pol)
		}
		for _, r := range c.rules {
			fmt.Fprintf(&b, "\t\t%s\n", exprText(t.family, r.exprs))
		}
		b.WriteString("\t}\n")
		items = append(items, b.String())
	}
	sortStrings(items)
	return fmt.Sprintf("table %s %s {\n%s}\n", families[t.family], t.name, strings.Join(items, ""))
}

func (k *Kernel) writeSet(b *strings.Builder, s *set) { k.writeSetOf(b, s, true) }

// writeSetOf writes s, with handles and expiry times when detailed.
func (k *Kernel) writeSetOf(b *strings.Builder, s *set, detailed bool) {
	kind := "set"
	if s.flags&setMap != 0 {
		kind = "map"
	}
	fmt.Fprintf(b, "\t%s %s {", kind, s.name)
	if detailed {
		fmt.Fprintf(b, " # handle %d", s.handle)
	}
	fmt.Fprintf(b, "\n\t\tkey type %d len %d", s.keyType, s.keyLen)
	if s.flags&setMap != 0 {
		fmt.Fprintf(b, ", data type %#x len %d", s.dataType, s.dataLen)
	}
	var fl []string
	for bit, n := range map[uint32]string{setAnonymous: "anonymous", setConstant: "constant", setInterval: "interval",
		setMap: "map", setTimeout: "timeout", setObject: "object", 0x80: "concat", 0x20: "dynamic"} {
		if s.flags&bit != 0 {
			fl = append(fl, n)
		}
	}
	if len(fl) > 0 {
		fmt.Fprintf(b, "; flags %s", strings.Join(sortStrings(fl), ","))
	}
	b.WriteString("\n")
	if len(s.elems) > 0 {
		b.WriteString("\t\telements = {\n")
		now := k.now()
		for _, e := range s.elems {
			fmt.Fprintf(b, "\t\t\t%x", e.key)
			if e.keyEnd != nil {
				fmt.Fprintf(b, "-%x", e.keyEnd)
			}
			if e.flags&elemIntervalEnd != 0 {
				b.WriteString(" (interval end)")
			}
			switch {
			case e.jump != "":
				fmt.Fprintf(b, " : jump %s", e.jump)
			case e.data != nil:
				da, _ := attrs(e.data)
				if v, ok := da[unix.NFTA_DATA_VALUE]; ok {
					fmt.Fprintf(b, " : %x", v)
				} else {
					fmt.Fprintf(b, " : verdict %s", verdictText(da[unix.NFTA_DATA_VERDICT]))
				}
			case e.objref != "":
				fmt.Fprintf(b, " : %s", e.objref)
			}
			if !e.expires.IsZero() {
				if detailed {
					fmt.Fprintf(b, " expires %s", e.expires.Sub(now).Round(time.Millisecond))
				} else {
					fmt.Fprintf(b, " timeout %dms", e.timeout)
				}
			}
			b.WriteString(",\n")
		}
		b.WriteString("\t\t}\n")
	}
	b.WriteString("\t}\n")
}

func sortStrings(l []string) []string {
	for i := range l {
		for j := i + 1; j < len(l); j++ {
			if l[j] < l[i] {
				l[i], l[j] = l[j], l[i]
			}
		}
	}
	return l
}

// exprTypes are the expressions String decodes, by name.
var exprTypes = func() map[string]reflect.Type {
	types := map[string]reflect.Type{}
	for name, e := range map[string]expr.Any{"payload": &expr.Payload{}, "cmp": &expr.Cmp{}, "meta": &expr.Meta{},
		"lookup": &expr.Lookup{}, "counter": &expr.Counter{}, "ct": &expr.Ct{}, "bitwise": &expr.Bitwise{},
		"objref": &expr.Objref{}, "dynset": &expr.Dynset{}, "log": &expr.Log{}, "limit": &expr.Limit{}, "nat": &expr.NAT{},
		"masq": &expr.Masq{}, "reject": &expr.Reject{}, "range": &expr.Range{}, "redir": &expr.Redir{}, "notrack": &expr.Notrack{},
		"exthdr": &expr.Exthdr{}, "fib": &expr.Fib{}, "byteorder": &expr.Byteorder{}, "rt": &expr.Rt{}, "quota": &expr.Quota{},
		"hash": &expr.Hash{}, "numgen": &expr.Numgen{}, "flow_offload": &expr.FlowOffload{}, "connlimit": &expr.Connlimit{},
		"socket": &expr.Socket{}, "tproxy": &expr.TProxy{}, "queue": &expr.Queue{}} {
		types[name] = reflect.TypeOf(e).Elem()
	}
	return types
}()

// exprText writes a rule's expressions, one "name{fields}" each.
func exprText(family uint8, b []byte) string {
	items, err := list(b)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	var out []string
	for _, it := range items {
		e, _ := attrs(it)
		name := str(e[1])
		if name == "immediate" {
			da, _ := attrs(e[2])
			ia, _ := attrs(da[2])
			if v, ok := ia[unix.NFTA_DATA_VERDICT]; ok {
				out = append(out, verdictText(v))
				continue
			}
		}
		if ty, ok := exprTypes[name]; ok {
			v := reflect.New(ty)
			if err := expr.Unmarshal(family, e[2], v.Interface().(expr.Any)); err == nil {
				out = append(out, fmt.Sprintf("%s%+v", name, v.Elem().Interface()))
				continue
			}
		}
		out = append(out, name+"{"+hex.EncodeToString(e[2])+"}")
	}
	return strings.Join(out, " ")
}

// verdictText is a verdict (NFTA_DATA_VERDICT's payload) as nft says it.
func verdictText(v []byte) string {
	va, _ := attrs(v)
	code := int32(be32(va[unix.NFTA_VERDICT_CODE]))
	switch code {
	case 0:
		return "drop"
	case 1:
		return "accept"
	case -1:
		return "continue"
	case -2:
		return "break"
	case -3:
		return "jump " + str(va[unix.NFTA_VERDICT_CHAIN])
	case -4:
		return "goto " + str(va[unix.NFTA_VERDICT_CHAIN])
	case -5:
		return "return"
	}
	return fmt.Sprintf("verdict %d", code)
}
