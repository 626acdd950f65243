package runtime

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// rnnActivation returns the named RNN activation with its alpha and beta.
func rnnActivation(name string, alpha, beta float32, hasAlpha, hasBeta bool) (func(float32) float32, error) {
	def := func(a, b float32) {
		if !hasAlpha {
			alpha = a
		}
		if !hasBeta {
			beta = b
		}
	}
	switch name {
	case "Sigmoid":
		return kernels.Sigmoid32, nil
	case "Tanh":
		return kernels.Tanh32, nil
	case "Relu":
		return func(x float32) float32 { return max(x, 0) }, nil
	case "HardSigmoid":
		def(0.2, 0.5)
		return func(x float32) float32 { return min(max(alpha*x+beta, 0), 1) }, nil
	case "LeakyRelu":
		def(0.01, 0)
		return func(x float32) float32 {
			if x < 0 {
				return alpha * x
			}
			return x
		}, nil
	case "ThresholdedRelu":
		def(1, 0)
		return func(x float32) float32 {
			if x > alpha {
				return x
			}
			return 0
		}, nil
	case "ScaledTanh":
		def(1, 1)
		return func(x float32) float32 { return alpha * float32(math.Tanh(float64(beta*x))) }, nil
	case "Affine":
		def(1, 0)
		return func(x float32) float32 { return alpha*x + beta }, nil
	case "Elu":
		def(1, 0)
		return func(x float32) float32 {
			if x < 0 {
				return alpha * float32(math.Expm1(float64(x)))
			}
			return x
		}, nil
	case "Softsign":
		return func(x float32) float32 { return x / (1 + float32(math.Abs(float64(x)))) }, nil
	case "Softplus":
		return softplus, nil
	case "ParametricSoftplus":
		def(1, 1)
		return func(x float32) float32 { return alpha * softplus(beta*x) }, nil
	}
	return nil, unsupportedf("activation %q is not supported", name)
}

// rnnSpec holds the attributes RNN, LSTM and GRU share.
type rnnSpec struct {
	gates   int
	hidden  int
	dirs    int
	reverse bool // forward-only models may run reversed
	layout  int
	clip    float32
	// acts are the activations over whole rows, per direction in the
	// node's order.
	acts      []func(dst, src []float32)
	linBefore bool
	inForget  bool
}

func readRNN(b *builder, gates int, defActs []string) (*rnnSpec, error) {
	s := &rnnSpec{gates: gates, hidden: int(b.int("hidden_size", 0)), layout: int(b.int("layout", 0)),
		clip: b.float("clip", 0), linBefore: b.int("linear_before_reset", 0) != 0, inForget: b.int("input_forget", 0) != 0}
	switch d := b.str("direction", "forward"); d {
	case "forward":
		s.dirs = 1
	case "reverse":
		s.dirs, s.reverse = 1, true
	case "bidirectional":
		s.dirs = 2
	default:
		return nil, fmt.Errorf("direction %q is not valid", d)
	}
	if s.layout != 0 && s.layout != 1 {
		return nil, fmt.Errorf("layout %d is not valid", s.layout)
	}
	if s.inForget {
		return nil, unsupportedf("input_forget=1 is not supported")
	}
	var names []string
	for _, a := range b.n.Attr("activations").GetStrings() {
		names = append(names, string(a))
	}
	if names == nil {
		for range s.dirs {
			names = append(names, defActs...)
		}
	}
	if len(names) != len(defActs)*s.dirs {
		return nil, fmt.Errorf("activations lists %d functions, want %d", len(names), len(defActs)*s.dirs)
	}
	alphas, betas := b.floats("activation_alpha"), b.floats("activation_beta")
	for i, n := range names {
		var a, be float32
		if i < len(alphas) {
			a = alphas[i]
		}
		if i < len(betas) {
			be = betas[i]
		}
		f, err := rnnActivation(n, a, be, i < len(alphas), i < len(betas))
		if err != nil {
			return nil, err
		}
		s.acts = append(s.acts, rnnRow(n, f))
	}
	return s, nil
}

// rnnRow is the activation f named name over a row: Sigmoid and Tanh
// through their vector kernels (the values of kernels.Sigmoid32 and
// kernels.Tanh32, which rnnActivation returns for them), others element
// by element.
func rnnRow(name string, f func(float32) float32) func(dst, src []float32) {
	switch name {
	case "Sigmoid":
		return kernels.Sigmoid
	case "Tanh":
		return kernels.Tanh
	}
	return func(dst, src []float32) {
		for i, v := range src[:len(dst)] {
			dst[i] = f(v)
		}
	}
}

// rnnData holds the inputs common to RNN, LSTM and GRU, checked and
// unpacked.
type rnnData struct {
	x, w, r, bias  []float32
	seq, batch, in int
	lens           []int64
	h0, c0, p      []float32
	// hidden is hidden_size, or R's last dimension when the node leaves
	// the attribute out: found at each run, into the run's own data, as
	// runs of a session share the node's rnnSpec.
	hidden int
}

func (s *rnnSpec) unpack(in []*tensor.Tensor, withC bool) (*rnnData, error) {
	d := &rnnData{}
	var err error
	xt := in[0]
	if len(xt.Shape) != 3 {
		return nil, fmt.Errorf("input X %v must have rank 3", xt.Shape)
	}
	if s.layout == 1 {
		xt = transpose(xt, []int{1, 0, 2})
	}
	if d.x, err = floats(xt, "X"); err != nil {
		return nil, err
	}
	d.seq, d.batch, d.in = xt.Shape[0], xt.Shape[1], xt.Shape[2]
	if d.w, err = floats(in[1], "W"); err != nil {
		return nil, err
	}
	if d.r, err = floats(in[2], "R"); err != nil {
		return nil, err
	}
	h := s.hidden
	if h == 0 && len(in[2].Shape) == 3 {
		h = in[2].Shape[2]
	}
	d.hidden = h
	g := s.gates
	if len(d.w) != s.dirs*g*h*d.in || len(d.r) != s.dirs*g*h*h {
		return nil, fmt.Errorf("inputs W %v or R %v do not fit hidden_size %d, %d directions and input size %d", in[1].Shape, in[2].Shape, h, s.dirs, d.in)
	}
	opt := func(i int) *tensor.Tensor {
		if i < len(in) {
			return in[i]
		}
		return nil
	}
	if t := opt(3); t != nil {
		if d.bias, err = floats(t, "B"); err != nil {
			return nil, err
		}
		if len(d.bias) != s.dirs*2*g*h {
			return nil, fmt.Errorf("input B %v does not fit", t.Shape)
		}
	}
	if t := opt(4); t != nil {
		d.lens = asInt64(t)
		if len(d.lens) != d.batch {
			return nil, fmt.Errorf("sequence_lens %v does not fit batch size %d", t.Shape, d.batch)
		}
		for bi, n := range d.lens {
			if n < 0 || n > int64(d.seq) {
				return nil, fmt.Errorf("sequence_lens[%d] = %d is outside [0, %d]", bi, n, d.seq)
			}
		}
	}
	state := func(t *tensor.Tensor, name string) ([]float32, error) {
		if t == nil {
			return nil, nil
		}
		if s.layout == 1 {
			t = transpose(t, []int{1, 0, 2})
		}
		v, err := floats(t, name)
		if err == nil && len(v) != s.dirs*d.batch*h {
			err = fmt.Errorf("%s %v does not fit", name, t.Shape)
		}
		return v, err
	}
	if d.h0, err = state(opt(5), "initial_h"); err != nil {
		return nil, err
	}
	if withC {
		if d.c0, err = state(opt(6), "initial_c"); err != nil {
			return nil, err
		}
		if t := opt(7); t != nil {
			if d.p, err = floats(t, "P"); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// steps is the number of time steps of batch row bi: its sequence
// length, or all of them.
func (d *rnnData) steps(bi int) int {
	if d.lens != nil {
		return int(d.lens[bi])
	}
	return d.seq
}

// biasSum returns Wb + Rb of direction dir (gh = gates·hidden elements
// each) in dst, or nil when the node has no B.
func (d *rnnData) biasSum(dir, gh int, dst []float32) []float32 {
	if d.bias == nil {
		return nil
	}
	wb, rb := d.bias[dir*2*gh:], d.bias[dir*2*gh+gh:]
	for j := range dst {
		dst[j] = wb[j] + rb[j]
	}
	return dst
}

// project computes the input projections of every time step at once,
// xw = X·Wᵀ + bias (gh columns; bias nil for none), with wPack one
// direction's packed W.
func (d *rnnData) project(rc *runCtx, wPack *kernels.PackedB, gh int, xw, bias []float32) {
	var ep *kernels.Epilogue
	if bias != nil {
		ep = &kernels.Epilogue{ColBias: bias}
	}
	kernels.SgemmPackedB(rc.threads, false, d.seq*d.batch, 1, d.x, d.in, wPack, 0, xw, gh, ep)
}

// stepInputs copies into dst, row by batch row, the projected input xw
// (gh columns) of the time step that step t of a direction visits in
// that row's sequence; rows whose sequence has ended are left as they are.
func (d *rnnData) stepInputs(dst, xw []float32, t, gh int, rev bool) {
	for bi := 0; bi < d.batch; bi++ {
		if n := d.steps(bi); t < n {
			ts := stepIndex(t, n, rev)
			copy(dst[bi*gh:(bi+1)*gh], xw[(ts*d.batch+bi)*gh:])
		}
	}
}

// outputs packs Y (seq, dirs, batch, hidden) and the final states in the
// layout.
func (s *rnnSpec) outputs(d *rnnData, y []float32, finals ...[]float32) []*tensor.Tensor {
	batch, h := d.batch, d.hidden
	yt := tensor.FromFloat32(y, d.seq, s.dirs, batch, h)
	if s.layout == 1 {
		yt = transpose(yt, []int{2, 0, 1, 3})
	}
	res := []*tensor.Tensor{yt}
	for _, f := range finals {
		ft := tensor.FromFloat32(f, s.dirs, batch, h)
		if s.layout == 1 {
			ft = transpose(ft, []int{1, 0, 2})
		}
		res = append(res, ft)
	}
	return res
}

// clipRow clips every element of x to [−clip, clip] when the node has
// a clip.
func (s *rnnSpec) clipRow(x []float32) {
	if s.clip > 0 {
		for i, v := range x {
			x[i] = min(max(v, -s.clip), s.clip)
		}
	}
}

// stepIndex is the time step that step t of a direction visits in a
// sequence of n steps.
func stepIndex(t, n int, rev bool) int {
	if rev {
		return n - 1 - t
	}
	return t
}

// packWeights returns the g·h × in weights of each direction in w, used
// transposed, packed for the GEMM, from the cache when the weights are a
// constant: W (in the input size) for the projection of every time step,
// R (in the hidden size) for the recurrence of each step.
func (s *rnnSpec) packWeights(cache *packCache, wt *tensor.Tensor, w []float32, g, h, in int) []*kernels.PackedB {
	pack := func() []*kernels.PackedB {
		ps := make([]*kernels.PackedB, s.dirs)
		for dir := range ps {
			ps[dir] = kernels.PackB(true, in, g*h, w[dir*g*h*in:(dir+1)*g*h*in], in)
		}
		return ps
	}
	if ps := cache.get(wt, len(w), pack); ps != nil {
		return ps
	}
	return pack()
}

func buildLSTM(b *builder) (kernel, error) {
	s, err := readRNN(b, 4, []string{"Sigmoid", "Tanh", "Tanh"})
	if err != nil {
		return nil, err
	}
	wCache, rCache := b.c.newPackCache(), b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		d, err := s.unpack(in, true)
		if err != nil {
			return nil, err
		}
		h, g, nb := d.hidden, 4, d.batch
		wPacks := s.packWeights(wCache, in[1], d.w, g, h, d.in)
		rPacks := s.packWeights(rCache, in[2], d.r, g, h, h)
		y := make([]float32, d.seq*s.dirs*nb*h)
		hN, cN := make([]float32, s.dirs*nb*h), make([]float32, s.dirs*nb*h)
		gates := make([]float32, nb*g*h)
		xw := make([]float32, d.seq*nb*g*h)
		bias := make([]float32, g*h)
		tanhC := make([]float32, h)
		for dir := 0; dir < s.dirs; dir++ {
			f, gf, hf := s.acts[dir*3], s.acts[dir*3+1], s.acts[dir*3+2]
			rev := s.reverse || dir == 1
			// All input projections at once, with both biases: xw = X·Wᵀ + Wb + Rb.
			d.project(rc, wPacks[dir], g*h, xw, d.biasSum(dir, g*h, bias))
			hs, cs := hN[dir*nb*h:(dir+1)*nb*h], cN[dir*nb*h:(dir+1)*nb*h]
			if d.h0 != nil {
				copy(hs, d.h0[dir*nb*h:])
			}
			if d.c0 != nil {
				copy(cs, d.c0[dir*nb*h:])
			}
			var pi, po, pf []float32
			if d.p != nil {
				pi, po, pf = d.p[dir*3*h:dir*3*h+h], d.p[dir*3*h+h:dir*3*h+2*h], d.p[dir*3*h+2*h:dir*3*h+3*h]
			}
			for t := 0; t < d.seq; t++ {
				// gates = xw of each batch row's own time step + H·Rᵀ.
				d.stepInputs(gates, xw, t, g*h, rev)
				kernels.SgemmPackedB(1, false, nb, 1, hs, h, rPacks[dir], 1, gates, g*h, nil)
				for bi := 0; bi < nb; bi++ {
					n := d.steps(bi)
					if t >= n {
						continue
					}
					ts := stepIndex(t, n, rev)
					gr := gates[bi*g*h : (bi+1)*g*h]
					// The gates in ONNX's order: input, output, forget, cell.
					ig, og, fg, cg := gr[:h], gr[h:2*h], gr[2*h:3*h], gr[3*h:]
					hr, cr := hs[bi*h:(bi+1)*h], cs[bi*h:(bi+1)*h]
					if pi != nil {
						for j, c := range cr {
							ig[j] += pi[j] * c
							fg[j] += pf[j] * c
						}
						s.clipRow(gr[:h])
						s.clipRow(gr[2*h:])
						f(ig, ig)
						f(fg, fg)
					} else {
						s.clipRow(gr)
						f(gr[:3*h], gr[:3*h])
					}
					gf(cg, cg)
					for j, c := range cr {
						cr[j] = fg[j]*c + ig[j]*cg[j]
					}
					if pi != nil {
						for j, c := range cr {
							og[j] += po[j] * c
						}
						s.clipRow(og)
						f(og, og)
					}
					hf(tanhC, cr)
					yr := y[((ts*s.dirs+dir)*nb+bi)*h:]
					for j, o := range og {
						hr[j] = o * tanhC[j]
						yr[j] = hr[j]
					}
				}
			}
		}
		return s.outputs(d, y, hN, cN), nil
	}, nil
}

func buildGRU(b *builder) (kernel, error) {
	s, err := readRNN(b, 3, []string{"Sigmoid", "Tanh"})
	if err != nil {
		return nil, err
	}
	wCache, rCache := b.c.newPackCache(), b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		d, err := s.unpack(in, false)
		if err != nil {
			return nil, err
		}
		h, g, nb := d.hidden, 3, d.batch
		wPacks := s.packWeights(wCache, in[1], d.w, g, h, d.in)
		rPacks := s.packWeights(rCache, in[2], d.r, g, h, h)
		y := make([]float32, d.seq*s.dirs*nb*h)
		hN := make([]float32, s.dirs*nb*h)
		xw := make([]float32, d.seq*nb*g*h)
		hr := make([]float32, nb*g*h)
		bias := make([]float32, g*h)
		rbh := make([]float32, h) // the recurrent bias of h left out of xw
		zr, rh, hc := make([]float32, 2*h), make([]float32, h), make([]float32, h)
		for dir := 0; dir < s.dirs; dir++ {
			f, gf := s.acts[dir*2], s.acts[dir*2+1]
			rev := s.reverse || dir == 1
			r := d.r[dir*g*h*h : (dir+1)*g*h*h]
			// All input projections at once, with the biases that add to
			// them: Wb, Rb of z and r, and Rb of h unless the reset gate
			// multiplies it (linear_before_reset).
			clear(rbh)
			colBias := d.biasSum(dir, g*h, bias)
			if colBias != nil && s.linBefore {
				wb, rb := d.bias[dir*2*g*h:], d.bias[dir*2*g*h+g*h:]
				copy(colBias[2*h:], wb[2*h:3*h])
				copy(rbh, rb[2*h:3*h])
			}
			d.project(rc, wPacks[dir], g*h, xw, colBias)
			hs := hN[dir*nb*h : (dir+1)*nb*h]
			if d.h0 != nil {
				copy(hs, d.h0[dir*nb*h:])
			}
			for t := 0; t < d.seq; t++ {
				// z and r recurrences (and h's when linear_before_reset).
				kernels.SgemmPackedB(1, false, nb, 1, hs, h, rPacks[dir], 0, hr, g*h, nil)
				for bi := 0; bi < nb; bi++ {
					n := d.steps(bi)
					if t >= n {
						continue
					}
					ts := stepIndex(t, n, rev)
					xr := xw[(ts*nb+bi)*g*h:]
					hrow := hs[bi*h : (bi+1)*h]
					hh := hr[bi*g*h:]
					for j := range zr {
						zr[j] = xr[j] + hh[j]
					}
					s.clipRow(zr)
					f(zr, zr)
					z, rg := zr[:h], zr[h:]
					if s.linBefore {
						for j := range hc {
							hc[j] = rg[j] * (hh[2*h+j] + rbh[j])
						}
					} else {
						for j := range rh {
							rh[j] = rg[j] * hrow[j]
						}
						kernels.Sgemm(false, true, 1, h, h, 1, rh, h, r[2*h*h:], h, 0, hc, h)
					}
					for j := range hc {
						hc[j] += xr[2*h+j]
					}
					s.clipRow(hc)
					gf(hc, hc)
					yr := y[((ts*s.dirs+dir)*nb+bi)*h:]
					for j, ht := range hc {
						hnew := (1-z[j])*ht + z[j]*hrow[j]
						hrow[j] = hnew
						yr[j] = hnew
					}
				}
			}
		}
		return s.outputs(d, y, hN), nil
	}, nil
}

// buildRNN builds the plain RNN: Ht = f(Xt·Wᵀ + Ht−1·Rᵀ + Wb + Rb), f
// Tanh unless activations names another, on LSTM's path: one GEMM
// projects every time step's input with both biases, each step adds its
// recurrence onto its own inputs.
func buildRNN(b *builder) (kernel, error) {
	s, err := readRNN(b, 1, []string{"Tanh"})
	if err != nil {
		return nil, err
	}
	wCache, rCache := b.c.newPackCache(), b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		d, err := s.unpack(in, false)
		if err != nil {
			return nil, err
		}
		h, nb := d.hidden, d.batch
		wPacks := s.packWeights(wCache, in[1], d.w, 1, h, d.in)
		rPacks := s.packWeights(rCache, in[2], d.r, 1, h, h)
		y := make([]float32, d.seq*s.dirs*nb*h)
		hN := make([]float32, s.dirs*nb*h)
		xw := make([]float32, d.seq*nb*h)
		pre := make([]float32, nb*h) // one step's pre-activations
		bias := make([]float32, h)
		for dir := 0; dir < s.dirs; dir++ {
			f := s.acts[dir]
			rev := s.reverse || dir == 1
			d.project(rc, wPacks[dir], h, xw, d.biasSum(dir, h, bias))
			hs := hN[dir*nb*h : (dir+1)*nb*h]
			if d.h0 != nil {
				copy(hs, d.h0[dir*nb*h:])
			}
			for t := 0; t < d.seq; t++ {
				d.stepInputs(pre, xw, t, h, rev)
				kernels.SgemmPackedB(1, false, nb, 1, hs, h, rPacks[dir], 1, pre, h, nil)
				for bi := 0; bi < nb; bi++ {
					n := d.steps(bi)
					if t >= n {
						continue
					}
					pr := pre[bi*h : (bi+1)*h]
					s.clipRow(pr)
					f(pr, pr)
					copy(hs[bi*h:(bi+1)*h], pr)
					copy(y[((stepIndex(t, n, rev)*s.dirs+dir)*nb+bi)*h:], pr)
				}
			}
		}
		return s.outputs(d, y, hN), nil
	}, nil
}
