package nft

import (
	"net/netip"
	"testing"

	"github.com/cnibox/cnibox/internal/policymodel"
)

// TestPolicyElemKeys: the elements the agent writes have the length of
// their set's key type (what the kernel checks, and what a lookup of
// doctor's must match), for every kind and family, without a kernel; a
// Ported element's protocol and port sit where the tracer (and the
// kernel's concatenation) read them.
func TestPolicyElemKeys(t *testing.T) {
	t.Parallel()
	for _, a := range []netip.Addr{netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("fd00:9::2")} {
		for _, kind := range []policymodel.SetKind{policymodel.Addrs, policymodel.Ported} {
			e := policymodel.Elem{Prefix: netip.PrefixFrom(a, a.BitLen())}
			if kind == policymodel.Ported {
				e.Proto, e.Port = policymodel.TCP, 8080
			}
			v4, v6 := policyElems(kind, []policymodel.Elem{e})
			got := append(v4, v6...)
			set := policySetObj("s", kind, "", a.Is6())
			if len(got) != 1 || len(got[0].Key) != int(set.KeyType.Bytes) {
				t.Fatalf("%s in a %v set: %d elements, key %x; the set's key is %d bytes", a, kind, len(got), got[0].Key, set.KeyType.Bytes)
			}
			if k := policyElemKey(e, e.Proto != 0); string(k) != string(got[0].Key) {
				t.Errorf("%s: doctor looks %x up, the agent writes %x", a, k, got[0].Key)
			}
			if kind == policymodel.Ported {
				n := a.BitLen() / 8
				k := got[0].Key
				if k[n] != byte(policymodel.TCP) || k[n+4] != 8080>>8 || k[n+5] != 8080&0xff {
					t.Errorf("%s: ported key %x: protocol at %d, port at %d-%d expected", a, k, n, n+4, n+5)
				}
			}
		}
	}
}
