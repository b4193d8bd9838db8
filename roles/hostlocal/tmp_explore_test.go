package hostlocal_test

import (
	"fmt"
	"testing"

	"github.com/cnibox/cnibox/roles/hostlocal"
)

func BenchmarkExplore(b *testing.B) {
	for _, existing := range []int{1000, 5000, 20000, 60000} {
		for _, verb := range []string{"ADD", "DEL"} {
			b.Run(fmt.Sprintf("%d/%s", existing, verb), func(b *testing.B) {
				n := newNode(b)
				c := conf("1.1.0", benchIPAM)
				for done := 0; done < existing; done += 1000 {
					prefillFrom(b, n.dir, done, 1000)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					cid := fmt.Sprintf("bench-%d", i)
					if verb == "DEL" {
						b.StopTimer()
					}
					n.must(hostlocal.Role, "ADD", cid, c, nil)
					if verb == "DEL" {
						b.StartTimer()
					} else {
						b.StopTimer()
					}
					n.must(hostlocal.Role, "DEL", cid, c, nil)
					b.StartTimer()
				}
			})
		}
	}
}
