package fqdn

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// rr is a record of a test answer: A, AAAA (addr) or CNAME (target).
type rr struct {
	owner  string
	ttl    uint32
	addr   string
	target string
}

// newQuery is a query for name of type typ, packed, and as parsed.
func newQuery(t testing.TB, id uint16, name string, typ dnsmessage.Type) ([]byte, query) {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	must(t, b.StartQuestions())
	must(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}))
	msg, err := b.Finish()
	must(t, err)
	q, err := parseQuery(msg)
	must(t, err)
	return msg, q
}

// buildAnswer is the answer to q holding recs (and an OPT record in the
// additional section).
func buildAnswer(t testing.TB, q query, h dnsmessage.Header, recs ...rr) []byte {
	t.Helper()
	h.ID, h.Response = q.id, true
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	must(t, b.StartQuestions())
	must(t, b.Question(q.q))
	must(t, b.StartAnswers())
	for _, r := range recs {
		rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.owner), Class: dnsmessage.ClassINET, TTL: r.ttl}
		switch {
		case r.target != "":
			must(t, b.CNAMEResource(rh, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(r.target)}))
		case netip.MustParseAddr(r.addr).Is4():
			must(t, b.AResource(rh, dnsmessage.AResource{A: netip.MustParseAddr(r.addr).As4()}))
		default:
			must(t, b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(r.addr).As16()}))
		}
	}
	must(t, b.StartAdditionals())
	var opt dnsmessage.ResourceHeader
	must(t, opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, true)) // DO: TTL field 0x8000
	must(t, b.OPTResource(opt, dnsmessage.OPTResource{}))
	msg, err := b.Finish()
	must(t, err)
	return msg
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func addrs(pairs ...any) []LearnedAddr {
	var out []LearnedAddr
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, LearnedAddr{Addr: netip.MustParseAddr(pairs[i].(string)), TTL: time.Duration(pairs[i+1].(int)) * time.Second})
	}
	return out
}

func TestParseAnswer(t *testing.T) {
	_, q := newQuery(t, 7, "WWW.Example.test.", dnsmessage.TypeA)
	tests := []struct {
		name      string
		recs      []rr
		wantNames []string
		wantAddrs []LearnedAddr
		wantErr   error
	}{
		{
			name:      "A records",
			recs:      []rr{{owner: "www.example.test.", ttl: 30, addr: "192.0.2.1"}, {owner: "www.example.test.", ttl: 30, addr: "192.0.2.2"}},
			wantNames: []string{"www.example.test"},
			wantAddrs: addrs("192.0.2.1", 30, "192.0.2.2", 30),
		},
		{
			name: "CNAME chain: the least TTL on the way",
			recs: []rr{
				{owner: "www.example.test.", ttl: 100, target: "Edge.CDN.test."},
				{owner: "edge.cdn.test.", ttl: 20, target: "e1.cdn.test."},
				{owner: "e1.cdn.test.", ttl: 60, addr: "192.0.2.9"},
				{owner: "e1.cdn.test.", ttl: 5, addr: "2001:db8::9"},
			},
			wantNames: []string{"www.example.test", "edge.cdn.test", "e1.cdn.test"},
			wantAddrs: addrs("192.0.2.9", 20, "2001:db8::9", 5),
		},
		{
			name: "out of order, other names' records left out",
			recs: []rr{
				{owner: "e1.cdn.test.", ttl: 60, addr: "192.0.2.9"},
				{owner: "evil.test.", ttl: 60, addr: "198.51.100.66"},
				{owner: "www.example.test.", ttl: 100, target: "e1.cdn.test."},
				{owner: "other.test.", ttl: 60, target: "www.example.test."},
			},
			wantNames: []string{"www.example.test", "e1.cdn.test"},
			wantAddrs: addrs("192.0.2.9", 60),
		},
		{
			name: "a chain name's own records: only the last name's are learned",
			recs: []rr{
				// the query's zone answers its own address beside a CNAME
				// into a zone a policy names (finding 4 of issue 60)
				{owner: "www.example.test.", ttl: 60, addr: "198.51.100.66"},
				{owner: "www.example.test.", ttl: 60, target: "w1.allowed.test."},
				{owner: "w1.allowed.test.", ttl: 30, addr: "192.0.2.1"},
			},
			wantNames: []string{"www.example.test", "w1.allowed.test"},
			wantAddrs: addrs("192.0.2.1", 30),
		},
		{
			name: "a middle name's records are not learned either",
			recs: []rr{
				{owner: "www.example.test.", ttl: 60, target: "mid.test."},
				{owner: "mid.test.", ttl: 60, addr: "198.51.100.67"},
				{owner: "mid.test.", ttl: 60, target: "end.test."},
				{owner: "end.test.", ttl: 60, addr: "2001:db8::1"},
			},
			wantNames: []string{"www.example.test", "mid.test", "end.test"},
			wantAddrs: addrs("2001:db8::1", 60),
		},
		{
			name: "an address twice: the longer TTL",
			recs: []rr{
				{owner: "www.example.test.", ttl: 10, addr: "192.0.2.1"},
				{owner: "www.example.test.", ttl: 40, addr: "192.0.2.1"},
			},
			wantNames: []string{"www.example.test"},
			wantAddrs: addrs("192.0.2.1", 40),
		},
		{
			name:      "no records: NODATA",
			wantNames: []string{"www.example.test"},
		},
		{
			name: "a CNAME loop",
			recs: []rr{
				{owner: "www.example.test.", ttl: 10, target: "a.test."},
				{owner: "a.test.", ttl: 10, target: "www.example.test."},
			},
			wantErr: errChain,
		},
		{
			name: "a chain too long",
			recs: func() []rr {
				out := []rr{{owner: "www.example.test.", ttl: 10, target: "c0.test."}}
				for i := range maxChain {
					out = append(out, rr{owner: fmt.Sprintf("c%d.test.", i), ttl: 10, target: fmt.Sprintf("c%d.test.", i+1)})
				}
				return out
			}(),
			wantErr: errChain,
		},
		{
			name: "too many addresses",
			recs: func() []rr {
				var out []rr
				for i := range 5 {
					out = append(out, rr{owner: "www.example.test.", ttl: 10, addr: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}).String()})
				}
				return out
			}(),
			wantErr: errTooManyIPs,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseAnswer(buildAnswer(t, q, dnsmessage.Header{}, tt.recs...), q, 4, time.Hour)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			must(t, err)
			if !slices.Equal(a.names, tt.wantNames) {
				t.Errorf("names %q, want %q", a.names, tt.wantNames)
			}
			if !slices.Equal(a.addrs, tt.wantAddrs) {
				t.Errorf("addrs %v, want %v", a.addrs, tt.wantAddrs)
			}
			if a.overTTL {
				t.Errorf("overTTL with TTLs under the cap")
			}
		})
	}
}

func TestParseAnswerMismatch(t *testing.T) {
	_, q := newQuery(t, 7, "www.example.test.", dnsmessage.TypeA)
	ok := buildAnswer(t, q, dnsmessage.Header{}, rr{owner: "www.example.test.", ttl: 1, addr: "192.0.2.1"})
	if !isAnswerTo(ok, q) {
		t.Errorf("isAnswerTo the answer: false")
	}
	_, other := newQuery(t, 8, "www.example.test.", dnsmessage.TypeA)
	_, otherName := newQuery(t, 7, "www.example.tesT.x.", dnsmessage.TypeA)
	_, otherType := newQuery(t, 7, "www.example.test.", dnsmessage.TypeAAAA)
	for _, m := range [][]byte{
		buildAnswer(t, other, dnsmessage.Header{}),
		buildAnswer(t, otherName, dnsmessage.Header{}),
		buildAnswer(t, otherType, dnsmessage.Header{}),
	} {
		if _, err := parseAnswer(m, q, 10, time.Hour); !errors.Is(err, errMismatch) {
			t.Errorf("parseAnswer of another query's answer: %v, want errMismatch", err)
		}
		if isAnswerTo(m, q) {
			t.Errorf("isAnswerTo another query's answer: true")
		}
	}
	msg, _ := newQuery(t, 7, "www.example.test.", dnsmessage.TypeA) // QR clear
	if _, err := parseAnswer(msg, q, 10, time.Hour); !errors.Is(err, errMismatch) {
		t.Errorf("parseAnswer of a query: %v, want errMismatch", err)
	}
	// Cut in the header, the question, the answer record's data (the
	// additional section, an 11-byte OPT, is not read).
	for _, cut := range []int{0, 5, 12, 20, len(ok) - 11 - 2} {
		if _, err := parseAnswer(ok[:cut], q, 10, time.Hour); err == nil {
			t.Errorf("parseAnswer of %d of %d bytes: no error", cut, len(ok))
		}
	}
}

func TestCapTTLs(t *testing.T) {
	_, q := newQuery(t, 9, "www.example.test.", dnsmessage.TypeA)
	msg := buildAnswer(t, q, dnsmessage.Header{RCode: dnsmessage.RCodeSuccess},
		rr{owner: "www.example.test.", ttl: 86400, target: "e.test."}, rr{owner: "e.test.", ttl: 30, addr: "192.0.2.1"})
	a, err := parseAnswer(msg, q, 10, time.Hour)
	must(t, err)
	if !a.overTTL || a.addrs[0].TTL != 30*time.Second {
		t.Errorf("overTTL %v, addrs %v; want true, 30 s", a.overTTL, a.addrs)
	}
	out, err := capTTLs(msg, time.Hour)
	must(t, err)
	var m dnsmessage.Message
	must(t, m.Unpack(out))
	if got := []uint32{m.Answers[0].Header.TTL, m.Answers[1].Header.TTL}; !slices.Equal(got, []uint32{3600, 30}) {
		t.Errorf("TTLs %v, want [3600 30]", got)
	}
	if len(m.Additionals) != 1 || !m.Additionals[0].Header.DNSSECAllowed() {
		t.Errorf("OPT changed: %+v", m.Additionals)
	}
	same, err := capTTLs(out, time.Hour)
	must(t, err)
	if &same[0] != &out[0] {
		t.Errorf("capTTLs rewrote a message with nothing over the cap")
	}
}

func TestParseQueryAndReply(t *testing.T) {
	msg, q := newQuery(t, 42, "Www.Example.test.", dnsmessage.TypeAAAA)
	if q.id != 42 || q.name != "www.example.test" || !q.rd {
		t.Errorf("parseQuery = %+v", q)
	}
	var p dnsmessage.Parser
	h, err := p.Start(reply(q, dnsmessage.RCodeRefused, false))
	must(t, err)
	qs, err := p.AllQuestions()
	must(t, err)
	if h.ID != 42 || !h.Response || h.RCode != dnsmessage.RCodeRefused || len(qs) != 1 || qs[0] != q.q {
		t.Errorf("REFUSED reply: %+v %+v", h, qs)
	}
	h, err = p.Start(reply(q, dnsmessage.RCodeSuccess, true))
	must(t, err)
	if !h.Truncated {
		t.Errorf("TC reply without TC")
	}

	resp := append([]byte(nil), msg...)
	resp[2] |= 0x80 // QR
	notQuery := resp
	opcode := append([]byte(nil), msg...)
	opcode[2] |= 5 << 3 // UPDATE
	noQuestion := append([]byte(nil), msg[:12]...)
	noQuestion[5] = 0
	for _, tt := range []struct {
		msg  []byte
		want error
	}{{msg[:11], errNotQuery}, {notQuery, errNotQuery}, {opcode, errOpcode}, {noQuestion, errQuestion}} {
		if _, err := parseQuery(tt.msg); !errors.Is(err, tt.want) {
			t.Errorf("parseQuery: %v, want %v", err, tt.want)
		}
	}
}
