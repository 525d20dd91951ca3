package workload

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The generator's popularity and activity are Zipf-like: rank i is drawn
// with probability proportional to (i+1)^-s, so the top ranks take the
// large share issue 7's workload asks for. Checked both ways: the shares
// follow the power law, and draws land on each top rank at its share.
func TestZipfDrawsFollowThePowerLaw(t *testing.T) {
	for _, s := range []float64{0.8, 1.0, 1.2} {
		const n, draws = 10_000, 400_000
		z := newZipf(n, s)
		var total float64
		for i := range n {
			total += z.share(i)
		}
		if math.Abs(total-1) > 1e-9 {
			t.Fatalf("s=%v: shares sum to %v", s, total)
		}
		if got, want := z.share(0)/z.share(9), math.Pow(10, s); math.Abs(got-want)/want > 1e-9 {
			t.Errorf("s=%v: rank 1 is %.3f times rank 10, want %.3f", s, got, want)
		}
		r := rand.New(rand.NewPCG(1, uint64(s*10)))
		counts := make([]int, n)
		for range draws {
			counts[z.draw(r)]++
		}
		for _, i := range []int{0, 1, 9, 99} {
			want := z.share(i) * draws
			// Within five standard deviations of the binomial count.
			if dev := math.Abs(float64(counts[i]) - want); dev > 5*math.Sqrt(want) {
				t.Errorf("s=%v: rank %d drawn %d times, want about %.0f", s, i+1, counts[i], want)
			}
		}
	}
}
