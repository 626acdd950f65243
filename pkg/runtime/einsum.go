package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func buildEinsum(b *builder) (kernel, error) {
	eq := strings.ReplaceAll(b.str("equation", ""), " ", "")
	if eq == "" {
		return nil, fmt.Errorf("attribute equation is required")
	}
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		out, err := einsum(eq, in)
		return one(out), err
	}, nil
}

// einsum evaluates the equation by summing, for every output position, the
// product of the operands over all values of the contracted labels.
func einsum(eq string, in []*tensor.Tensor) (*tensor.Tensor, error) {
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(in) {
		return nil, fmt.Errorf("equation %q has %d operands, node has %d inputs", eq, len(terms), len(in))
	}
	// Ellipsis dimensions get labels '0', '1', ... aligned to the right.
	ell := 0
	for i, t := range terms {
		if strings.Contains(t, "...") {
			ell = max(ell, len(in[i].Shape)-(len(t)-3))
		}
	}
	ellLabels := func(n int) string {
		var s strings.Builder
		for k := ell - n; k < ell; k++ {
			s.WriteByte(byte('0' + k))
		}
		return s.String()
	}
	size := map[byte]int{}
	labels := make([]string, len(terms))
	count := map[byte]int{}
	for i, t := range terms {
		t = strings.Replace(t, "...", ellLabels(len(in[i].Shape)-(len(t)-3)), 1)
		if len(t) != len(in[i].Shape) {
			return nil, fmt.Errorf("term %q does not fit input %d of shape %v", terms[i], i, in[i].Shape)
		}
		labels[i] = t
		for k := 0; k < len(t); k++ {
			c := t[k]
			d := in[i].Shape[k]
			if prev, ok := size[c]; ok && prev != d {
				if prev == 1 {
					size[c] = d
				} else if d != 1 {
					return nil, fmt.Errorf("label %q has sizes %d and %d", c, prev, d)
				}
			} else if !ok {
				size[c] = d
			}
			count[c]++
		}
	}
	if explicit {
		rhs = strings.Replace(rhs, "...", ellLabels(ell), 1)
	} else {
		var once []byte
		for c, n := range count {
			if n == 1 && !(c >= '0' && c <= '9') {
				once = append(once, c)
			}
		}
		sort.Slice(once, func(i, j int) bool { return once[i] < once[j] })
		rhs = ellLabels(ell) + string(once)
	}
	var sum []byte
	for _, c := range sortedLabels(size) {
		if !strings.ContainsRune(rhs, rune(c)) {
			sum = append(sum, c)
		}
	}
	all := rhs + string(sum)
	dims := make([]int, len(all))
	pos := map[byte]int{}
	for i := 0; i < len(all); i++ {
		s, ok := size[all[i]]
		if !ok {
			return nil, fmt.Errorf("output label %q is in no input", all[i])
		}
		dims[i] = s
		pos[all[i]] = i
	}
	data := make([][]float32, len(in))
	strides := make([][]int, len(in))
	for i, t := range in {
		x, err := asFloat32(t)
		if err != nil {
			return nil, err
		}
		data[i] = x
		strides[i] = make([]int, len(all))
		s := 1
		for k := len(labels[i]) - 1; k >= 0; k-- {
			if t.Shape[k] != 1 {
				strides[i][pos[labels[i][k]]] += s
			}
			s *= t.Shape[k]
		}
	}
	os := dims[:len(rhs)]
	nOut := tensor.NumElements(os)
	nSum := tensor.NumElements(dims[len(rhs):])
	res := make([]float64, nOut)
	idx := make([]int, len(all))
	for o := 0; o < nOut; o++ {
		var acc float64
		for s := 0; s < nSum; s++ {
			unravelIdx(o*nSum+s, dims, idx)
			p := 1.0
			for i := range in {
				off := 0
				for k, v := range idx {
					off += v * strides[i][k]
				}
				p *= float64(data[i][off])
			}
			acc += p
		}
		res[o] = acc
	}
	return castTensor(&tensor.Tensor{DType: tensor.Double, Shape: append([]int(nil), os...), Data: res}, in[0].DType)
}

func sortedLabels(m map[byte]int) []byte {
	out := make([]byte, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
