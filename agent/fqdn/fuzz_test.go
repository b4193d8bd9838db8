package fqdn

import (
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzParseAnswer feeds a server's answer, as a server that lies could
// send it, to what the proxy does with one: parseAnswer never panics, and
// what it returns keeps the bounds (the query name first, a chain no
// longer than maxChain, at most the addresses asked, each valid and once);
// capTTLs and isAnswerTo never panic either, nor parseQuery on the same
// bytes.
func FuzzParseAnswer(f *testing.F) {
	_, q := newQuery(f, 7, "www.example.test.", dnsmessage.TypeA)
	f.Add(buildAnswer(f, q, dnsmessage.Header{}, rr{owner: "www.example.test.", ttl: 30, addr: "192.0.2.1"}))
	f.Add(buildAnswer(f, q, dnsmessage.Header{Truncated: true},
		rr{owner: "www.example.test.", ttl: 86400, target: "e.cdn.test."},
		rr{owner: "e.cdn.test.", ttl: 5, addr: "2001:db8::1"},
		rr{owner: "e.cdn.test.", ttl: 5, addr: "192.0.2.7"},
		rr{owner: "other.test.", ttl: 5, addr: "192.0.2.8"}))
	f.Add(buildAnswer(f, q, dnsmessage.Header{},
		rr{owner: "www.example.test.", ttl: 1, target: "a.test."}, rr{owner: "a.test.", ttl: 1, target: "www.example.test."}))
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxAddrs = 8
		_, _ = parseQuery(b)
		_ = isAnswerTo(b, q)
		a, err := parseAnswer(b, q, maxAddrs, time.Hour)
		if err != nil {
			return
		}
		if len(a.names) == 0 || a.names[0] != q.name || len(a.names) > maxChain+1 {
			t.Fatalf("names %q", a.names)
		}
		if len(a.addrs) > maxAddrs {
			t.Fatalf("%d addresses, over %d", len(a.addrs), maxAddrs)
		}
		seen := map[string]bool{}
		for _, x := range a.addrs {
			if !x.Addr.IsValid() || seen[x.Addr.String()] || x.TTL < 0 {
				t.Fatalf("addrs %v", a.addrs)
			}
			seen[x.Addr.String()] = true
		}
		if a.overTTL {
			_, _ = capTTLs(b, time.Hour)
		}
	})
}
