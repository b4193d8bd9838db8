package fqdn

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// LearnedAddr is one address of an answer and how long the pod may use it:
// the least TTL of its own record and of the CNAMEs that led to it, within
// Config's MinTTL and MaxTTL.
type LearnedAddr struct {
	Addr netip.Addr
	TTL  time.Duration
}

// query is what the proxy keeps of a pod's query: its ID and its one
// question, which the answer must repeat.
type query struct {
	id   uint16
	rd   bool
	q    dnsmessage.Question
	name string // q.Name, canonical
}

// Why a message from a pod is not forwarded: answered with errBadQuery's
// rcode, or dropped.
var (
	errNotQuery = errors.New("not a DNS query")      // dropped: not even a header, or a response
	errOpcode   = errors.New("not a standard query") // NOTIMP
	errQuestion = errors.New("not one question")     // FORMERR
)

// parseQuery reads a pod's query: a header with QR clear, opcode QUERY and
// exactly one question (what every stub resolver sends); the rest of the
// message (EDNS) is forwarded as it is and not read here.
func parseQuery(b []byte) (query, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || h.Response {
		return query{}, errNotQuery
	}
	qr := query{id: h.ID, rd: h.RecursionDesired}
	if h.OpCode != 0 {
		return qr, errOpcode
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return qr, errQuestion
	}
	qr.q = qs[0]
	qr.name = Canonical(qs[0].Name.String())
	return qr, nil
}

// answer is what an answer tells the proxy.
type answer struct {
	rcode     dnsmessage.RCode
	truncated bool
	// names: the query name, then each CNAME target on the chain, in
	// order, canonical.
	names []string
	// addrs: the A and AAAA records owned by the chain's last name, each
	// once, with the least TTL on the way (before Config's floor and cap).
	addrs []LearnedAddr
	// overTTL: an answer record has a TTL above the cap the caller passed
	// (capTTLs rewrites the message before the pod gets it).
	overTTL bool
}

// Limits of one answer: a server that sends more is treated as one that
// lies (the pod gets SERVFAIL), so what the pod gets is always all learned.
const (
	// maxChain: CNAMEs followed from the query name, past any real chain.
	maxChain = 16
	// maxRecords: answer records read (a 64 KiB TCP answer holds ~4,000
	// compressed A records).
	maxRecords = 1024
)

var (
	errMismatch   = errors.New("answer does not match the query")
	errTooMany    = errors.New("answer holds more records than the proxy reads")
	errChain      = errors.New("CNAME chain longer than the proxy follows, or a loop")
	errTooManyIPs = errors.New("answer holds more addresses than the proxy learns at once")
)

// parseAnswer reads a server's answer to q: it must be a response with
// q's ID and q's question (case aside); then the chain of CNAMEs from the
// query name through the answer section (in any order), and the A and
// AAAA records owned by the chain's last name: the addresses a resolver
// reaches by following the chain, which is what the pod connects to.
// Records of the names before it are not learned: a zone that answers
// "cn.attacker.test CNAME w1.example.test" beside an A record of its own
// name would otherwise have its own address learned for a chain that
// matches *.example.test (issue 60, finding 4). Records of other names (a
// server's extra, unasked-for data) are not learned, nor those of the
// authority and additional sections. Each address's TTL is the least of
// its record's and of the CNAMEs' from the query name to its owner: the
// pod holds the name -> address binding no longer than that. maxAddrs
// bounds the addresses; ttlCap marks answers to rewrite (overTTL).
func parseAnswer(b []byte, q query, maxAddrs int, ttlCap time.Duration) (answer, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		return answer{}, fmt.Errorf("parse answer: %w", err)
	}
	if !h.Response || h.ID != q.id {
		return answer{}, errMismatch
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return answer{}, fmt.Errorf("parse answer: %w", err)
	}
	if len(qs) != 1 || qs[0].Type != q.q.Type || qs[0].Class != q.q.Class || !strings.EqualFold(qs[0].Name.String(), q.q.Name.String()) {
		return answer{}, errMismatch
	}
	a := answer{rcode: h.RCode, truncated: h.Truncated}
	capSec := uint32(min(ttlCap/time.Second, 1<<31))
	type rec struct {
		owner string
		ttl   uint32
		cname string     // a CNAME's target
		addr  netip.Addr // an A or AAAA record's address
	}
	var recs []rec
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return answer{}, fmt.Errorf("parse answer: %w", err)
		}
		if len(recs) == maxRecords {
			return answer{}, errTooMany
		}
		if rh.TTL > capSec {
			a.overTTL = true
		}
		r := rec{owner: Canonical(rh.Name.String()), ttl: rh.TTL}
		switch {
		case rh.Class != dnsmessage.ClassINET:
			err = p.SkipAnswer()
			r.owner = ""
		case rh.Type == dnsmessage.TypeA:
			var ar dnsmessage.AResource
			ar, err = p.AResource()
			r.addr = netip.AddrFrom4(ar.A)
		case rh.Type == dnsmessage.TypeAAAA:
			var ar dnsmessage.AAAAResource
			ar, err = p.AAAAResource()
			r.addr = netip.AddrFrom16(ar.AAAA)
		case rh.Type == dnsmessage.TypeCNAME:
			var cr dnsmessage.CNAMEResource
			cr, err = p.CNAMEResource()
			r.cname = Canonical(cr.CNAME.String())
		default:
			err = p.SkipAnswer()
			r.owner = ""
		}
		if err != nil {
			return answer{}, fmt.Errorf("parse answer: %w", err)
		}
		if r.owner != "" {
			recs = append(recs, r)
		}
	}

	// The chain: each name's CNAME (the first one: a name has one).
	chainTTL := map[string]uint32{} // name -> least TTL of the CNAMEs to it
	name, ttl := q.name, uint32(1<<32-1)
	for {
		chainTTL[name] = ttl
		a.names = append(a.names, name)
		next := -1
		for i, r := range recs {
			if r.cname != "" && r.owner == name {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		if _, seen := chainTTL[recs[next].cname]; seen || len(a.names) > maxChain {
			return answer{}, errChain
		}
		name, ttl = recs[next].cname, min(ttl, recs[next].ttl)
	}
	at := map[netip.Addr]int{} // index in a.addrs
	last := a.names[len(a.names)-1]
	for _, r := range recs {
		if !r.addr.IsValid() || r.owner != last {
			continue
		}
		cttl := chainTTL[last]
		d := time.Duration(min(cttl, r.ttl)) * time.Second
		if i, ok := at[r.addr]; ok {
			a.addrs[i].TTL = max(a.addrs[i].TTL, d)
			continue
		}
		if len(a.addrs) == maxAddrs {
			return answer{}, errTooManyIPs
		}
		at[r.addr] = len(a.addrs)
		a.addrs = append(a.addrs, LearnedAddr{Addr: r.addr, TTL: d})
	}
	return a, nil
}

// capTTLs returns msg with every TTL above ttlCap lowered to it (a pod
// that caches the answer then holds it no longer than the proxy's rules
// last), or msg itself when none is above. OPT's TTL field holds EDNS
// flags and is left alone. A message that cannot be unpacked and packed
// again is an error (the pod gets SERVFAIL).
func capTTLs(msg []byte, ttlCap time.Duration) ([]byte, error) {
	var m dnsmessage.Message
	if err := m.Unpack(msg); err != nil {
		return nil, fmt.Errorf("unpack answer to cap its TTLs: %w", err)
	}
	capSec := uint32(min(ttlCap/time.Second, 1<<31))
	changed := false
	for _, sec := range [][]dnsmessage.Resource{m.Answers, m.Authorities, m.Additionals} {
		for i := range sec {
			if sec[i].Header.Type != dnsmessage.TypeOPT && sec[i].Header.TTL > capSec {
				sec[i].Header.TTL = capSec
				changed = true
			}
		}
	}
	if !changed {
		return msg, nil
	}
	out, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack answer with capped TTLs: %w", err)
	}
	return out, nil
}

// reply builds the proxy's own answer to q: a header with q's ID and
// rcode (TC set when truncated: the pod asks again over TCP) and q's
// question when it had one. It returns nil when that cannot be built.
func reply(q query, rcode dnsmessage.RCode, truncated bool) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 64), dnsmessage.Header{
		ID: q.id, Response: true, RecursionDesired: q.rd, RCode: rcode, Truncated: truncated,
	})
	if q.q.Name.Length > 0 {
		if b.StartQuestions() != nil || b.Question(q.q) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// isAnswerTo reports whether b is a response with q's ID and question.
func isAnswerTo(b []byte, q query) bool {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || !h.Response || h.ID != q.id {
		return false
	}
	qs, err := p.Question()
	return err == nil && qs.Type == q.q.Type && qs.Class == q.q.Class && strings.EqualFold(qs.Name.String(), q.q.Name.String())
}
