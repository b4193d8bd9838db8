package nft

import (
	"fmt"
	"testing"

	"github.com/cnibox/cnibox/netops/nstest"
)

// BenchmarkServicesRead: `cnibox inspect services` (ReadServices) and
// doctor's count (ServicesFrontendCount) of a table of 1,000 and 10,000
// Services x 4 endpoints, on the kernel in a namespace of its own (root).
//
//	go test -run '^$' -bench ServicesRead -benchtime 3x ./netops/nft
func BenchmarkServicesRead(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		h, err := Open(nstest.NewNS(b, "svcr"))
		if err != nil {
			b.Fatal(err)
		}
		s := NewServices(h, ServicesOptions{})
		if err := s.Apply(manySnap(n, 4)); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("services=%d/read", n), func(b *testing.B) {
			for b.Loop() {
				v, err := h.ReadServices()
				if err != nil || v == nil || len(v.Frontends) < n {
					b.Fatalf("ReadServices: %v (%d frontends)", err, len(v.Frontends))
				}
			}
		})
		b.Run(fmt.Sprintf("services=%d/count", n), func(b *testing.B) {
			for b.Loop() {
				if c, ok, err := h.ServicesFrontendCount(); err != nil || !ok || c < n {
					b.Fatalf("ServicesFrontendCount: %d %v %v", c, ok, err)
				}
			}
		})
		h.Close()
	}
}
