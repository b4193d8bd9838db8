package nft

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cnibox/cnibox/internal/svcmodel"
)

// TestServicesMaglev: removing one of N endpoints moves its own slots and
// few others (Maglev's promise), and every endpoint holds its share of
// the slots within one.
func TestServicesMaglev(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 1))
	var sumMoved float64
	runs := 0
	defer func() {
		if avg := sumMoved / float64(runs); avg > 5 {
			t.Errorf("removing one of N endpoints moved %.2f times its share of the slots on average, want at most 5", avg)
		} else {
			t.Logf("removing one of N endpoints moved %.2f times its share (1/N) of the slots on average", avg)
		}
	}()
	for _, n := range []int{2, 3, 4, 5, 8, 16, 50, 200} {
		for trial := range 20 {
			var eps []svcmodel.Endpoint
			for i := range n {
				eps = append(eps, svcEP(fmt.Sprintf("10.%d.%d.%d", trial, i/250, 1+i%250), uint16(8000+rng.IntN(100))))
			}
			eps = sortedEps(eps)
			m := slotCount(n)
			before := maglev(eps, m)
			count := make([]int, n)
			for _, i := range before {
				count[i]++
			}
			for i, c := range count {
				if c < m/n || c > m/n+1 {
					t.Fatalf("n=%d m=%d: endpoint %d holds %d slots, want %d or %d", n, m, i, c, m/n, m/n+1)
				}
			}
			gone := rng.IntN(n)
			rest := append(append([]svcmodel.Endpoint(nil), eps[:gone]...), eps[gone+1:]...)
			if slotCount(n-1) != m {
				continue // another slot count: another table
			}
			after := maglev(rest, m)
			moved := 0
			for s := range m {
				if eps[before[s]] != rest[after[s]] {
					moved++
				}
			}
			// Its own ~m/n slots must move; Maglev moves some more
			// (with 7-14 slots an endpoint, a few times its share: all of them, as `mod N` over a list moves, is what it avoids).
			own := count[gone]
			if moved < own || float64(moved) > 7*float64(m)/float64(n) {
				t.Errorf("n=%d m=%d: removing one endpoint moved %d of %d slots (its own %d; want at most %.0f)", n, m, moved, m, own, 7*float64(m)/float64(n))
			}
			sumMoved += float64(moved) / (float64(m) / float64(n))
			runs++
		}
	}
}
