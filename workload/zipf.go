package workload

import (
	"math"
	"math/rand/v2"
	"sort"
)

// zipf draws ranks 0 … n-1 with weight 1/(rank+1)^s. Unlike rand.Zipf it
// accepts s ≤ 1, the skew of real follower counts; it costs a table of n
// float64s and a binary search per draw.
type zipf struct {
	cdf []float64
}

func newZipf(n int, s float64) *zipf {
	cdf := make([]float64, n)
	var sum float64
	for i := range cdf {
		sum += math.Pow(float64(i+1), -s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	cdf[n-1] = 1
	return &zipf{cdf: cdf}
}

func (z *zipf) draw(r *rand.Rand) int {
	return sort.SearchFloat64s(z.cdf, r.Float64())
}

// share is the probability of rank i, for tests.
func (z *zipf) share(i int) float64 {
	if i == 0 {
		return z.cdf[0]
	}
	return z.cdf[i] - z.cdf[i-1]
}

// permutation returns a random permutation of 0 … n-1 as int32s.
func permutation(n int, r *rand.Rand) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}
