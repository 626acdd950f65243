package kernels

// SumSquaresChannels adds Σx² over each channel of x, laid out as [outer,
// channels, inner], to sums[c], in float64 and in index order (so the sums
// do not depend on threads). Non-finite values add nothing.
func SumSquaresChannels(x []float32, outer, channels, inner int, sums []float64) {
	for o := range outer {
		for c := range channels {
			row := x[(o*channels+c)*inner : (o*channels+c+1)*inner]
			var s float64
			for _, v := range row {
				f := float64(v)
				if f-f == 0 { // finite
					s += f * f
				}
			}
			sums[c] += s
		}
	}
}
