package runtime

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func floats(t *tensor.Tensor, what string) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("%s is missing", what)
	}
	x, ok := t.Data.([]float32)
	if !ok {
		return nil, fmt.Errorf("%s: type %s is not supported (float only)", what, t.DType)
	}
	return x, nil
}

// buildMatMul returns numpy matmul: batched over broadcast leading dims,
// with 1-D operands promoted and the promoted dimension dropped again.
func buildMatMul(b *builder) (kernel, error) {
	cache := b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		return matMul(rc, in, cache)
	}, nil
}

func matMul(rc *runCtx, in []*tensor.Tensor, cache *packCache) ([]*tensor.Tensor, error) {
	a, b := in[0], in[1]
	if a.DType != tensor.Float || b.DType != tensor.Float {
		return matMulInt(a, b)
	}
	as, bs := a.Shape, b.Shape
	if len(as) == 0 || len(bs) == 0 {
		return nil, fmt.Errorf("MatMul of a scalar")
	}
	dropA, dropB := len(as) == 1, len(bs) == 1
	if dropA {
		as = []int{1, as[0]}
	}
	if dropB {
		bs = []int{bs[0], 1}
	}
	m, k := as[len(as)-2], as[len(as)-1]
	k2, n := bs[len(bs)-2], bs[len(bs)-1]
	if k != k2 {
		return nil, fmt.Errorf("shapes %v and %v do not fit (inner dims %d and %d)", a.Shape, b.Shape, k, k2)
	}
	batch, err := broadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, err
	}
	os := slices.Concat(batch, []int{m, n})
	out := rc.newFloatOut(os...)
	x, y, o := a.Float32s(), b.Float32s(), out.Float32s()
	nb := tensor.NumElements(batch)
	switch {
	case len(bs) == 2:
		// One matrix on the right: the batch of A is one tall product,
		// with B packed once (and kept when it is a constant).
		if packs := cache.get(b, k*n, func() []*kernels.PackedB { return []*kernels.PackedB{kernels.PackB(false, k, n, y, n)} }); packs != nil {
			kernels.SgemmPackedB(rc.threads, false, nb*m, 1, x, k, packs[0], 0, o, n, nil)
		} else {
			kernels.SgemmParallel(rc.threads, false, false, nb*m, n, k, 1, x, k, y, n, 0, o, n)
		}
	case nb >= 2*rc.threads:
		// Many small products (attention heads): one product per task.
		ai := bcastIndex(as[:len(as)-2], batch)
		bi := bcastIndex(bs[:len(bs)-2], batch)
		kernels.Parallel(rc.threads, nb, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				kernels.Sgemm(false, false, m, n, k, 1, x[ai[i]*m*k:], k, y[bi[i]*k*n:], n, 0, o[i*m*n:], n)
			}
		})
	default:
		ai := bcastIndex(as[:len(as)-2], batch)
		bi := bcastIndex(bs[:len(bs)-2], batch)
		for i := 0; i < nb; i++ {
			kernels.SgemmParallel(rc.threads, false, false, m, n, k, 1,
				x[ai[i]*m*k:], k, y[bi[i]*k*n:], n, 0, o[i*m*n:], n)
		}
	}
	final := slices.Clone(batch)
	if !dropA {
		final = append(final, m)
	}
	if !dropB {
		final = append(final, n)
	}
	return one(view(out, final)), nil
}

// matMulInt multiplies integer matrices in int64 (shape paths, tests).
func matMulInt(a, b *tensor.Tensor) ([]*tensor.Tensor, error) {
	if !a.DType.IsInteger() || a.DType != b.DType || len(a.Shape) != 2 || len(b.Shape) != 2 {
		return nil, fmt.Errorf("MatMul of %s and %s is not supported", a, b)
	}
	m, k, n := a.Shape[0], a.Shape[1], b.Shape[1]
	if b.Shape[0] != k {
		return nil, fmt.Errorf("shapes %v and %v do not fit", a.Shape, b.Shape)
	}
	x, y := asInt64(a), asInt64(b)
	res := make([]int64, m*n)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				res[i*n+j] += x[i*k+p] * y[p*n+j]
			}
		}
	}
	out, err := castTensor(tensor.FromInt64(res, m, n), a.DType)
	return one(out), err
}

func buildGemm(b *builder) (kernel, error) {
	alpha, beta := b.float("alpha", 1), b.float("beta", 1)
	ta, tb := b.int("transA", 0) != 0, b.int("transB", 0) != 0
	cache := b.c.newPackCache()
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "A")
		if err != nil {
			return nil, err
		}
		w, err := floats(in[1], "B")
		if err != nil {
			return nil, err
		}
		as, bs := in[0].Shape, in[1].Shape
		if len(as) != 2 || len(bs) != 2 {
			return nil, fmt.Errorf("inputs A %v and B %v must be matrices", as, bs)
		}
		m, k := as[0], as[1]
		if ta {
			m, k = k, m
		}
		k2, n := bs[0], bs[1]
		if tb {
			k2, n = n, k2
		}
		if k != k2 {
			return nil, fmt.Errorf("inputs A %v and B %v do not fit", as, bs)
		}
		out := rc.newFloatOut(m, n)
		o := out.Float32s()
		cb := float32(0)
		if len(in) > 2 && in[2] != nil && beta != 0 {
			c, err := floats(in[2], "C")
			if err != nil {
				return nil, err
			}
			if _, err := broadcastShape(in[2].Shape, []int{m, n}); err != nil {
				return nil, fmt.Errorf("input C: %w", err)
			}
			stridedGather(o, c, []int{m, n}, bcastStrides(in[2].Shape, []int{m, n}), 0)
			cb = beta
		}
		if packs := cache.get(in[1], k*n, func() []*kernels.PackedB { return []*kernels.PackedB{kernels.PackB(tb, k, n, w, bs[1])} }); packs != nil {
			kernels.SgemmPackedB(rc.threads, ta, m, alpha, x, as[1], packs[0], cb, o, n, nil)
		} else {
			kernels.SgemmParallel(rc.threads, ta, tb, m, n, k, alpha, x, as[1], w, bs[1], cb, o, n)
		}
		return one(out), nil
	}, nil
}

// convAttrs are the window attributes shared by Conv, ConvTranspose and pooling.
type convAttrs struct {
	kernel, strides, dilations, pads, outPad, outShape []int64
	autoPad                                            string
	group                                              int
	ceil                                               bool
	// last is the geometry of the spatial shapes seen last: a model's
	// runs ask for the same ones every time.
	last atomic.Pointer[convGeomEntry]
}

type convGeomEntry struct {
	in, k  []int
	g      *kernels.ConvGeom
	padEnd []int
}

func readConvAttrs(b *builder) (*convAttrs, error) {
	a := &convAttrs{
		kernel: b.ints("kernel_shape"), strides: b.ints("strides"), dilations: b.ints("dilations"),
		pads: b.ints("pads"), outPad: b.ints("output_padding"), outShape: b.ints("output_shape"),
		autoPad: b.str("auto_pad", "NOTSET"), group: int(b.int("group", 1)), ceil: b.int("ceil_mode", 0) != 0,
	}
	switch a.autoPad {
	case "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return nil, unsupportedf("auto_pad=%q is not supported", a.autoPad)
	}
	if a.group < 1 {
		return nil, fmt.Errorf("group %d must be positive", a.group)
	}
	return a, nil
}

// geometry resolves the window over spatial input dims in for kernel k.
// The geometry and padEnd it returns are shared by the calls with the same
// shapes: callers only read them.
func (a *convAttrs) geometry(in, k []int) (*kernels.ConvGeom, []int, error) {
	if e := a.last.Load(); e != nil && slices.Equal(e.in, in) && slices.Equal(e.k, k) {
		return e.g, e.padEnd, nil
	}
	g, padEnd, err := a.newGeometry(in, k)
	if err == nil {
		a.last.Store(&convGeomEntry{in: slices.Clone(in), k: slices.Clone(k), g: g, padEnd: padEnd})
	}
	return g, padEnd, err
}

func (a *convAttrs) newGeometry(in, k []int) (*kernels.ConvGeom, []int, error) {
	in, k = slices.Clone(in), slices.Clone(k)
	nd := len(in)
	g := &kernels.ConvGeom{In: in, Kernel: k, Strides: make([]int, nd), Dilations: make([]int, nd), PadBegin: make([]int, nd), Out: make([]int, nd)}
	padEnd := make([]int, nd)
	for d := 0; d < nd; d++ {
		g.Strides[d], g.Dilations[d] = 1, 1
		if len(a.strides) == nd {
			g.Strides[d] = int(a.strides[d])
		}
		if len(a.dilations) == nd {
			g.Dilations[d] = int(a.dilations[d])
		}
		if g.Strides[d] < 1 || g.Dilations[d] < 1 {
			return nil, nil, fmt.Errorf("strides %v and dilations %v must be positive", a.strides, a.dilations)
		}
		ek := (k[d]-1)*g.Dilations[d] + 1
		switch a.autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			out := (in[d] + g.Strides[d] - 1) / g.Strides[d]
			total := max(0, (out-1)*g.Strides[d]+ek-in[d])
			if a.autoPad == "SAME_UPPER" {
				g.PadBegin[d] = total / 2
			} else {
				g.PadBegin[d] = (total + 1) / 2
			}
			padEnd[d] = total - g.PadBegin[d]
		case "VALID":
		default:
			if len(a.pads) == 2*nd {
				g.PadBegin[d], padEnd[d] = int(a.pads[d]), int(a.pads[nd+d])
			}
		}
		span := in[d] + g.PadBegin[d] + padEnd[d] - ek
		if span < 0 {
			return nil, nil, fmt.Errorf("kernel %v with dilations is larger than padded input %v", k, in)
		}
		if a.ceil {
			o := (span+g.Strides[d]-1)/g.Strides[d] + 1
			// The last window must start inside the input or the leading pad.
			if (o-1)*g.Strides[d] >= in[d]+g.PadBegin[d] {
				o--
			}
			g.Out[d] = o
		} else {
			g.Out[d] = span/g.Strides[d] + 1
		}
	}
	return g, padEnd, nil
}

func buildConv(b *builder) (kernel, error) {
	a, err := readConvAttrs(b)
	if err != nil {
		return nil, err
	}
	cv := &convKernel{attrs: a, want: b.c.convWay}
	if b.c.constOf != nil && len(b.n.Inputs) >= 2 {
		if k := cv.planAhead(b.n.Inputs[0], b.c.constOf(b.n.Inputs[1])); k != "" {
			b.c.chose(b.n.Name, k)
		}
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		var bias *tensor.Tensor
		if len(in) > 2 {
			bias = in[2]
		}
		out, err := cv.run(rc, in[0], in[1], bias, nil, kernels.ActNone, nil, false)
		if err != nil {
			return nil, err
		}
		return one(out), nil
	}, nil
}

// convKernel runs one Conv node. Per shape it picks a direct depthwise
// loop (one filter per channel), a GEMM on the input itself (1×1, stride
// 1, no padding), a 2-D convolution by SgemmConv or im2col + GEMM; the
// weights of each group are packed for the GEMM once and reused while the
// weight tensor is the same, and SgemmConv's plan is made once per
// geometry and packed weights.
type convKernel struct {
	attrs *convAttrs
	// want is the SgemmConv way the session asks for (Options.ConvWay).
	want kernels.ConvWay
	// weights are the packed weight panels of each group.
	weights packedAGroups
	// plan is SgemmConv's plan for the geometry and packed weights seen
	// last: a model's runs ask for the same ones every time.
	plan atomic.Pointer[convPlanEntry]
}

type convPlanEntry struct {
	g    *kernels.ConvGeom
	pa   *kernels.PackedA
	plan kernels.ConvPlan
}

// planFor returns SgemmConv's plan for g with the weights pa, made when
// the pair is first seen.
func (cv *convKernel) planFor(pa *kernels.PackedA, g *kernels.ConvGeom) kernels.ConvPlan {
	if e := cv.plan.Load(); e != nil && e.g == g && e.pa == pa {
		return e.plan
	}
	e := &convPlanEntry{g: g, pa: pa, plan: kernels.PlanConv(pa, g, cv.want)}
	cv.plan.Store(e)
	return e.plan
}

// convRoute is how convKernel.run computes a geometry that is not
// depthwise: a GEMM on the input itself (direct: 1×1, stride 1, no
// padding), SgemmConv (implicit: other 2-D) or im2col + GEMM.
func convRoute(g *kernels.ConvGeom) (direct, implicit bool) {
	direct = g.KernelSize() == 1 && allOnes(g.Strides) && allZero(g.PadBegin) && equalIntSlices(g.In, g.Out)
	return direct, !direct && len(g.In) == 2
}

// planAhead makes at compile time the choices that run makes at its first
// call, when the weights w are constant and x declares its channels and
// spatial size: the geometry, the packed weights and SgemmConv's plan,
// which the runs then find. It returns the choice's label ("" when it
// cannot be made yet).
func (cv *convKernel) planAhead(x *onnxgraph.Value, w *tensor.Tensor) string {
	if x == nil {
		return ""
	}
	dims, ok := x.Shape()
	if !ok || w == nil || w.DType != tensor.Float || len(dims) < 3 || len(dims) != len(w.Shape) {
		return ""
	}
	in := make([]int, len(dims)-2)
	for i, d := range dims[2:] {
		if d.Param != "" || d.Size <= 0 {
			return ""
		}
		in[i] = int(d.Size)
	}
	c, m, grp := int(dims[1].Size), w.Shape[0], cv.attrs.group
	if dims[1].Param != "" || c <= 0 || c != w.Shape[1]*grp || m%grp != 0 {
		return ""
	}
	g, _, err := cv.attrs.geometry(in, w.Shape[2:])
	if err != nil {
		return "" // the run reports it
	}
	cg, mg := c/grp, m/grp
	if len(g.In) == 2 && cg == 1 && mg == 1 {
		return convLabel(g, "depthwise")
	}
	packed := cv.packedWeights(w, grp, mg, cg*g.KernelSize())
	switch direct, implicit := convRoute(g); {
	case direct:
		return convLabel(g, "gemm")
	case implicit:
		return convLabel(g, cv.planFor(packed[0], g).String())
	}
	return convLabel(g, "im2col+gemm")
}

// convLabel names a convolution for the profile: kernel, strides and the
// way it is computed.
func convLabel(g *kernels.ConvGeom, way string) string {
	dims := func(v []int) string {
		s := ""
		for i, d := range v {
			if i > 0 {
				s += "×"
			}
			s += fmt.Sprint(d)
		}
		return s
	}
	l := dims(g.Kernel)
	if !allOnes(g.Strides) {
		l += "/" + dims(g.Strides)
	}
	return l + " " + way
}

var colPool = sync.Pool{New: func() any { return new([]float32) }}

// packedWeights returns the mg × kk weights of each of grp groups packed.
func (cv *convKernel) packedWeights(w *tensor.Tensor, grp, mg, kk int) []*kernels.PackedA {
	return cv.weights.get(w, grp, func(wd []float32, gi int) *kernels.PackedA {
		return kernels.PackA(false, mg, kk, 1, wd[gi*mg*kk:], kk)
	})
}

// bnPost is an inference BatchNormalization applied after a Conv's bias:
// y = float32(x·scale[c]) + shift[c].
type bnPost struct{ scale, shift []float32 }

// run computes act(bn(conv(x, w) + bias) + residual), bn and residual
// omitted when nil (residualFirst: residual + bn(…), the Add's operand
// order).
func (cv *convKernel) run(rc *runCtx, xt, wt, bt *tensor.Tensor, bn *bnPost, act kernels.Activation, rt *tensor.Tensor, residualFirst bool) (*tensor.Tensor, error) {
	a := cv.attrs
	x, err := floats(xt, "X")
	if err != nil {
		return nil, err
	}
	w, err := floats(wt, "W")
	if err != nil {
		return nil, err
	}
	xs, ws := xt.Shape, wt.Shape
	if len(xs) < 3 || len(ws) != len(xs) {
		return nil, fmt.Errorf("input X %v and W %v do not fit", xs, ws)
	}
	n, c := xs[0], xs[1]
	m := ws[0]
	grp := a.group
	if c != ws[1]*grp || m%grp != 0 {
		return nil, fmt.Errorf("input X %v, W %v and group %d do not fit", xs, ws, grp)
	}
	ks := ws[2:]
	if a.kernel != nil && !equalInts(a.kernel, ks) {
		return nil, fmt.Errorf("kernel_shape %v differs from W %v", a.kernel, ws)
	}
	g, _, err := a.geometry(xs[2:], ks)
	if err != nil {
		return nil, err
	}
	var bias []float32
	if bt != nil {
		if bias, err = floats(bt, "B"); err != nil {
			return nil, err
		}
		if len(bias) != m {
			return nil, fmt.Errorf("input B has %d elements, W has %d output channels", len(bias), m)
		}
	}
	outShape := slices.Concat([]int{n, m}, g.Out)
	var residual []float32
	if rt != nil {
		if !slices.Equal(rt.Shape, outShape) {
			return nil, fmt.Errorf("residual %v does not have the output shape %v", rt.Shape, outShape)
		}
		residual = rt.Float32s()
	}
	out := rc.floatOutPart(outShape)
	y := out.Float32s()
	cg, mg := c/grp, m/grp
	kk := cg * g.KernelSize()
	is, os := g.InSize(), g.OutSize()
	ep := &kernels.Epilogue{RowBias: bias, Act: act}
	if bn != nil {
		if len(bn.scale) != m {
			return nil, fmt.Errorf("fused BatchNormalization has %d channels, W has %d output channels", len(bn.scale), m)
		}
		ep.RowScale, ep.RowShift = bn.scale, bn.shift
	}
	if bias == nil && bn == nil && act == kernels.ActNone && residual == nil {
		ep = nil
	}
	// epilogueFor returns the epilogue of image img, output channels
	// [c0, c0+mc): the residual is per image and group.
	epilogueFor := func(img, c0, mc int) *kernels.Epilogue {
		if ep == nil || (residual == nil && mc == m) {
			return ep
		}
		e := *ep
		if e.RowBias != nil {
			e.RowBias = e.RowBias[c0 : c0+mc]
		}
		if e.RowScale != nil {
			e.RowScale, e.RowShift = e.RowScale[c0:c0+mc], e.RowShift[c0:c0+mc]
		}
		if residual != nil {
			e.Residual, e.ResidualFirst = residual[(img*m+c0)*os:(img*m+c0+mc)*os], residualFirst
		}
		return &e
	}
	if len(g.In) == 2 && cg == 1 && mg == 1 {
		// Depthwise: a direct loop per channel, channels over the threads.
		if rc.profiling() {
			rc.chose(convLabel(g, "depthwise"))
		}
		kernels.Parallel(rc.threads, n*c, max(1, 1<<15/max(1, os*g.KernelSize())), func(lo, hi int) {
			for j := lo; j < hi; {
				img, ch := j/c, j%c
				end := min(hi, (img+1)*c) - img*c
				kernels.Depthwise2D(g, x[img*c*is:], w, y[img*m*os:], ch, end, epilogueFor(img, 0, m))
				j += end - ch
			}
		})
		return out, rc.ctx.Err()
	}
	packed := cv.packedWeights(wt, grp, mg, kk)
	// A 1×1 stride-1 unpadded convolution needs no lowering; other 2-D
	// convolutions gather the GEMM's panels from the image (SgemmConv),
	// the same values as packed from an im2col matrix.
	direct, implicit := convRoute(g)
	var plan kernels.ConvPlan
	if implicit {
		plan = cv.planFor(packed[0], g)
	}
	if rc.profiling() {
		switch {
		case direct:
			rc.chose(convLabel(g, "gemm"))
		case implicit:
			rc.chose(convLabel(g, plan.String()))
		default:
			rc.chose(convLabel(g, "im2col+gemm"))
		}
	}
	// image computes image i with the given threads and column buffer.
	image := func(i, threads int, col []float32) {
		for gi := 0; gi < grp; gi++ {
			xg := x[(i*c+gi*cg)*is : (i*c+(gi+1)*cg)*is]
			yg := y[(i*m+gi*mg)*os : (i*m+(gi+1)*mg)*os]
			gep := epilogueFor(i, gi*mg, mg)
			switch {
			case direct:
				kernels.SgemmPacked(threads, packed[gi], os, false, xg, os, 0, yg, os, gep)
			case implicit:
				kernels.SgemmConv(threads, packed[gi], g, plan, xg, yg, os, gep)
			default:
				kernels.Im2colParallel(threads, g, cg, xg, col)
				kernels.SgemmPacked(threads, packed[gi], os, false, col, os, 0, yg, os, gep)
			}
		}
	}
	colBuf := func() (*[]float32, []float32) {
		if direct || implicit {
			return nil, nil
		}
		colp := colPool.Get().(*[]float32)
		if cap(*colp) < kk*os {
			*colp = make([]float32, kk*os)
		}
		return colp, (*colp)[:kk*os]
	}
	// A batch splits over the threads by whole images when it divides
	// evenly or the images are small: one hand-off per convolution
	// instead of two per image, and each thread lowers its own images.
	// Every image is computed by the same operations either way.
	if t := rc.threads; t > 1 && n > 1 && (n%t == 0 || m*kk*os < 1<<21) {
		kernels.Parallel(t, n, 1, func(lo, hi int) {
			colp, col := colBuf()
			if colp != nil {
				defer colPool.Put(colp)
			}
			for i := lo; i < hi && rc.ctx.Err() == nil; i++ {
				image(i, 1, col)
			}
		})
		if err := rc.ctx.Err(); err != nil {
			return nil, err
		}
		return out, nil
	}
	colp, col := colBuf()
	if colp != nil {
		defer colPool.Put(colp)
	}
	for i := 0; i < n; i++ {
		if err := rc.ctx.Err(); err != nil {
			return nil, err
		}
		image(i, rc.threads, col)
	}
	return out, nil
}

func equalInts(a []int64, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int(a[i]) != b[i] {
			return false
		}
	}
	return true
}

func equalIntSlices(a, b []int) bool { return slices.Equal(a, b) }

func allOnes(s []int) bool {
	for _, v := range s {
		if v != 1 {
			return false
		}
	}
	return true
}

func allZero(s []int) bool {
	for _, v := range s {
		if v != 0 {
			return false
		}
	}
	return true
}

func buildConvTranspose(b *builder) (kernel, error) {
	a, err := readConvAttrs(b)
	if err != nil {
		return nil, err
	}
	packs := &packedAGroups{}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		if _, err := floats(in[1], "W"); err != nil {
			return nil, err
		}
		xs, ws := in[0].Shape, in[1].Shape
		if len(xs) < 3 || len(ws) != len(xs) {
			return nil, fmt.Errorf("input X %v and W %v do not fit", xs, ws)
		}
		nd := len(xs) - 2
		n, c := xs[0], xs[1]
		grp := a.group
		if ws[0] != c || c%grp != 0 {
			return nil, fmt.Errorf("input X %v, W %v and group %d do not fit", xs, ws, grp)
		}
		mg := ws[1]
		m := mg * grp
		ks := ws[2:]
		g := &kernels.ConvGeom{Kernel: ks, Strides: make([]int, nd), Dilations: make([]int, nd), PadBegin: make([]int, nd), Out: xs[2:], In: make([]int, nd)}
		for d := 0; d < nd; d++ {
			g.Strides[d], g.Dilations[d] = 1, 1
			if len(a.strides) == nd {
				g.Strides[d] = int(a.strides[d])
			}
			if len(a.dilations) == nd {
				g.Dilations[d] = int(a.dilations[d])
			}
			op := 0
			if len(a.outPad) == nd {
				op = int(a.outPad[d])
			}
			ek := (ks[d]-1)*g.Dilations[d] + 1
			full := g.Strides[d]*(xs[2+d]-1) + op + ek
			var pb, pe int
			switch {
			case len(a.outShape) >= nd:
				target := int(a.outShape[len(a.outShape)-nd+d])
				total := full - target
				if a.autoPad == "SAME_UPPER" {
					pb = total / 2
				} else {
					pb = total - total/2
				}
				if total < 0 {
					// A larger output than the input covers: extra zeros at the end.
					pb = 0
				}
				pe = total - pb
			case a.autoPad == "SAME_UPPER" || a.autoPad == "SAME_LOWER":
				target := xs[2+d] * g.Strides[d]
				total := max(0, full-target)
				if a.autoPad == "SAME_UPPER" {
					pb = total / 2
				} else {
					pb = total - total/2
				}
				pe = total - pb
			case a.autoPad == "NOTSET" && len(a.pads) == 2*nd:
				pb, pe = int(a.pads[d]), int(a.pads[nd+d])
			}
			g.PadBegin[d] = pb
			g.In[d] = full - pb - pe
			if g.In[d] < 0 {
				return nil, fmt.Errorf("pads %v leave no output", a.pads)
			}
		}
		var bias []float32
		if len(in) > 2 && in[2] != nil {
			if bias, err = floats(in[2], "B"); err != nil {
				return nil, err
			}
		}
		out := rc.newFloat(slices.Concat([]int{n, m}, g.In)...) // col2im accumulates
		y := out.Float32s()
		cg := c / grp
		kk := mg * g.KernelSize()
		is, os := g.OutSize(), g.InSize() // input positions, output positions
		// Wᵀ (kk × cg) of each group.
		packed := packs.get(in[1], grp, func(wd []float32, gi int) *kernels.PackedA {
			return kernels.PackA(true, kk, cg, 1, wd[gi*cg*kk:], kk)
		})
		colp := colPool.Get().(*[]float32)
		defer colPool.Put(colp)
		if cap(*colp) < kk*is {
			*colp = make([]float32, kk*is)
		}
		col := (*colp)[:kk*is]
		if rc.profiling() {
			rc.chose(convLabel(g, "packed gemm+col2im"))
		}
		for i := 0; i < n; i++ {
			for gi := 0; gi < grp; gi++ {
				xg := x[(i*c+gi*cg)*is : (i*c+(gi+1)*cg)*is]
				// col (mg·K × in positions) = Wᵀ (mg·K × cg) · X (cg × in positions)
				kernels.SgemmPacked(rc.threads, packed[gi], is, false, xg, is, 0, col, is, nil)
				kernels.Col2imParallel(rc.threads, g, mg, col, y[(i*m+gi*mg)*os:(i*m+(gi+1)*mg)*os])
			}
			if bias != nil {
				for j := 0; j < m; j++ {
					row := y[(i*m+j)*os : (i*m+j+1)*os]
					for p := range row {
						row[p] += bias[j]
					}
				}
			}
		}
		return one(out), nil
	}, nil
}

func buildPool(isMax bool) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		a, err := readConvAttrs(b)
		if err != nil {
			return nil, err
		}
		if a.kernel == nil {
			return nil, fmt.Errorf("attribute kernel_shape is required")
		}
		colMajor := isMax && b.int("storage_order", 0) != 0
		countPad := b.int("count_include_pad", 0) != 0
		wantIdx := isMax && len(b.n.Outputs) > 1 && b.n.Outputs[1] != nil
		return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			xt := in[0]
			if isMax && (xt.DType == tensor.Uint8 || xt.DType == tensor.Int8) {
				// Small integers are exact in float32: pool there and cast back.
				f, err := castTensor(xt, tensor.Float)
				if err != nil {
					return nil, err
				}
				xt = f
			}
			x, err := floats(xt, "X")
			if err != nil {
				return nil, err
			}
			xs := in[0].Shape
			nd := len(xs) - 2
			if nd < 1 || len(a.kernel) != nd {
				return nil, fmt.Errorf("kernel_shape %v does not fit X %v", a.kernel, xs)
			}
			ks := make([]int, nd)
			for i, k := range a.kernel {
				ks[i] = int(k)
			}
			g, padEnd, err := a.geometry(xs[2:], ks)
			if err != nil {
				return nil, err
			}
			nc := xs[0] * xs[1]
			out := rc.newFloatOut(slices.Concat(xs[:2], g.Out)...)
			var idx []int64
			if wantIdx {
				idx = make([]int64, out.Len())
			}
			is, os := g.InSize(), g.OutSize()
			if idx == nil {
				kernels.PoolParallel(rc.threads, g, nc, x, out.Float32s(), isMax, countPad, padEnd, nil)
			}
			for p := 0; p < nc && idx != nil; p++ {
				var am []int64
				if idx != nil {
					am = idx[p*os : (p+1)*os]
				}
				kernels.Pool(g, 1, x[p*is:(p+1)*is], out.Float32s()[p*os:(p+1)*os], isMax, countPad, padEnd, am)
				for j := range am {
					if colMajor {
						am[j] = colMajorIndex(am[j], g.In)
					}
					am[j] += int64(p * is)
				}
			}
			res := []*tensor.Tensor{out}
			if in[0].DType != tensor.Float {
				o, err := castTensor(out, in[0].DType)
				if err != nil {
					return nil, err
				}
				res[0] = o
			}
			if wantIdx {
				res = append(res, tensor.FromInt64(idx, out.Shape...))
			}
			return res, nil
		}, nil
	}
}

// colMajorIndex turns a row-major flat index within dims into the
// column-major one (MaxPool's storage_order=1).
func colMajorIndex(i int64, dims []int) int64 {
	pos := make([]int, len(dims))
	unravelIdx(int(i), dims, pos)
	var off, stride int64 = 0, 1
	for d := 0; d < len(dims); d++ {
		off += int64(pos[d]) * stride
		stride *= int64(dims[d])
	}
	return off
}

func globalPoolKernel(isMax bool) kernel {
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		if len(xs) < 2 {
			return nil, fmt.Errorf("input X %v needs rank 2 or more", xs)
		}
		os := slices.Clone(xs)
		for i := 2; i < len(os); i++ {
			os[i] = 1
		}
		out := rc.newFloatOut(os...)
		o := out.Float32s()
		sp := tensor.NumElements(xs[2:])
		kernels.Parallel(rc.threads, len(o), max(1, parGrain/max(1, sp)), func(lo, hi int) {
			for p := lo; p < hi; p++ {
				plane := x[p*sp : (p+1)*sp]
				if isMax {
					m := float32(math.Inf(-1))
					for _, v := range plane {
						if v > m || v != v {
							m = v
						}
					}
					o[p] = m
					continue
				}
				o[p] = float32(kernels.Sum(plane) / float64(sp))
			}
		})
		return one(out), nil
	}
}

// perChannel applies y = x·scale[c] + shift[c] over channel axis 1, with
// the product rounded before the addition (no fused multiply-add), as the
// BatchNormalization epilogue of a fused Conv computes it.
// Planes are split over the run's threads.
func perChannel(rc *runCtx, x []float32, shape []int, scale, shift []float32) *tensor.Tensor {
	out := rc.newFloatOut(shape...)
	perChannelInto(rc, out.Float32s(), x, shape, scale, shift)
	return out
}

// perChannelInto is perChannel writing into y, which may be x.
func perChannelInto(rc *runCtx, y, x []float32, shape []int, scale, shift []float32) {
	const perChannelChunk = 2048
	c := 1
	if len(shape) > 1 {
		c = shape[1]
	}
	sp := tensor.NumElements(shape[min(2, len(shape)):])
	planes := len(x) / max(c*sp, 1) * c
	kernels.Parallel(rc.threads, planes, max(1, parGrain/max(1, sp)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			s, t := scale[q%c], shift[q%c]
			// The product, then the shift on the product while it is in
			// the first-level cache: two vector passes per chunk, each
			// one IEEE operation per element.
			for i := q * sp; i < (q+1)*sp; i += perChannelChunk {
				j := min(i+perChannelChunk, (q+1)*sp)
				kernels.BinaryScalar(kernels.BinMul, y[i:j], x[i:j], s, false)
				kernels.BinaryScalar(kernels.BinAdd, y[i:j], y[i:j], t, false)
			}
		}
	})
}

func buildBatchNorm(b *builder) (kernel, error) {
	eps := b.float("epsilon", 1e-5)
	training := b.int("training_mode", 0) != 0
	momentum := b.float("momentum", 0.9)
	if b.opset < 9 && b.int("spatial", 1) == 0 {
		return nil, unsupportedf("spatial=0 is not supported")
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		var p [4][]float32
		for i, name := range []string{"scale", "B", "mean", "var"} {
			if p[i], err = floats(in[i+1], name); err != nil {
				return nil, err
			}
		}
		c := 1
		if len(in[0].Shape) > 1 {
			c = in[0].Shape[1]
		}
		for i, name := range []string{"scale", "B", "mean", "var"} {
			if len(p[i]) != c {
				return nil, fmt.Errorf("%s has %d elements for %d channels", name, len(p[i]), c)
			}
		}
		mean, variance := p[2], p[3]
		if training {
			// Normalise with the batch statistics and update the running ones.
			mean, variance = channelStats(x, in[0].Shape)
		}
		p[2], p[3] = mean, variance
		scale, shift := kernels.BatchNormFold(p[0], p[1], p[2], p[3], nil, eps)
		y := perChannel(rc, x, in[0].Shape, scale, shift)
		if !training {
			return one(y), nil
		}
		runMean, runVar := make([]float32, c), make([]float32, c)
		inMean, _ := floats(in[3], "input_mean")
		inVar, _ := floats(in[4], "input_var")
		for j := 0; j < c; j++ {
			runMean[j] = inMean[j]*momentum + mean[j]*(1-momentum)
			runVar[j] = inVar[j]*momentum + variance[j]*(1-momentum)
		}
		return []*tensor.Tensor{y, tensor.FromFloat32(runMean, c), tensor.FromFloat32(runVar, c)}, nil
	}, nil
}

// channelStats returns the mean and (population) variance of each channel
// (axis 1) over the batch and spatial axes.
func channelStats(x []float32, shape []int) (mean, variance []float32) {
	c := shape[1]
	sp := tensor.NumElements(shape[2:])
	n := shape[0]
	mean, variance = make([]float32, c), make([]float32, c)
	for j := 0; j < c; j++ {
		var s, s2 float64
		for i := 0; i < n; i++ {
			for _, v := range x[(i*c+j)*sp : (i*c+j+1)*sp] {
				s += float64(v)
			}
		}
		cnt := float64(n * sp)
		mu := s / cnt
		for i := 0; i < n; i++ {
			for _, v := range x[(i*c+j)*sp : (i*c+j+1)*sp] {
				d := float64(v) - mu
				s2 += d * d
			}
		}
		mean[j], variance[j] = float32(mu), float32(s2/cnt)
	}
	return mean, variance
}

// buildInstanceNorm builds InstanceNormalization: GroupNormalization with
// one group per channel (groupNorm).
func buildInstanceNorm(b *builder) (kernel, error) {
	eps := b.float("epsilon", 1e-5)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		scale, err := floats(in[1], "scale")
		if err != nil {
			return nil, err
		}
		bias, err := floats(in[2], "B")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		if len(xs) < 3 || len(scale) != xs[1] || len(bias) != xs[1] {
			return nil, fmt.Errorf("input X %v, scale and B do not fit", xs)
		}
		return one(groupNorm(rc, x, xs, xs[1], scale, bias, eps)), nil
	}, nil
}

// buildGroupNorm builds GroupNormalization: the channels of each batch
// entry in num_groups groups of consecutive channels, each group
// normalized as a whole (groupNorm). Opset 18 scales and shifts each group
// by its scale[g] and bias[g]; opset 21 has scale and bias per channel, as
// the paper and the frameworks do, and ONNX deprecated the opset-18
// definition for that. Each opset runs as its definition says, so a model
// means what its opset says it means.
func buildGroupNorm(b *builder) (kernel, error) {
	if !b.has("num_groups") {
		return nil, fmt.Errorf("attribute num_groups is missing")
	}
	groups, eps := b.int("num_groups", 0), b.float("epsilon", 1e-5)
	if err := checkStashType(b); err != nil {
		return nil, err
	}
	perGroup := b.opset < 21
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		scale, err := floats(in[1], "scale")
		if err != nil {
			return nil, err
		}
		bias, err := floats(in[2], "bias")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		if len(xs) < 2 {
			return nil, fmt.Errorf("input X %v has no channel axis", xs)
		}
		c := xs[1]
		if groups <= 0 || int64(c)%groups != 0 {
			return nil, fmt.Errorf("num_groups %d does not divide the %d channels of input X %v", groups, c, xs)
		}
		want, per := c, "channel"
		if perGroup {
			want, per = int(groups), "group"
		}
		if len(scale) != want || len(bias) != want {
			return nil, fmt.Errorf("scale and bias have %d and %d elements; opset %d has one per %s (%d)", len(scale), len(bias), b.opset, per, want)
		}
		if perGroup {
			scale, bias = groupToChannels(scale, c), groupToChannels(bias, c)
		}
		return one(groupNorm(rc, x, xs, int(groups), scale, bias, eps)), nil
	}, nil
}

// groupToChannels repeats each group's value for the channels of the group:
// p holds one value per group of consecutive channels, c channels in all.
func groupToChannels(p []float32, c int) []float32 {
	out := make([]float32, c)
	per := c / len(p)
	for i := range out {
		out[i] = p[i/per]
	}
	return out
}

// groupNorm normalizes x, of shape [N, C, D1, ...] with C a multiple of
// groups, over each batch entry's groups of C/groups consecutive channels
// (contiguous, so each is one row of kernels.LayerNorm), then scales and
// shifts each channel c:
//
//	y = float32((x − μ)/√(σ² + eps))·scale[c] + shift[c]
//
// the product rounded before the addition (perChannelInto). The statistics
// are LayerNormalization's, float64 with the variance summed around the
// mean: the E[x²] − E[x]² of the ONNX function bodies cancels to noise in
// float32 when a group's mean is large against its spread, as it is after
// a convolution's bias. Groups are split over the run's threads, then
// channel planes.
func groupNorm(rc *runCtx, x []float32, xs []int, groups int, scale, shift []float32, eps float32) *tensor.Tensor {
	out := rc.newFloatOut(xs...)
	if len(x) == 0 {
		return out
	}
	n := xs[1] / groups * tensor.NumElements(xs[2:]) // elements of one group
	y := out.Float32s()
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	kernels.Parallel(rc.threads, xs[0]*groups, max(1, parGrain/max(1, n)), func(lo, hi int) {
		kernels.LayerNorm(x[lo*n:hi*n], y[lo*n:hi*n], hi-lo, n, ones, nil, eps, nil, nil)
	})
	perChannelInto(rc, y, y, xs, scale, shift)
	return out
}

// checkStashType refuses a stash_type other than float (1). The engine
// takes the normalizations' statistics in float64 from float32 inputs and
// rounds the normalized values to float32, which is stash_type float's
// computation, done more exactly; another stash type asks for its own
// rounding of the first stage, which the engine does not reproduce.
func checkStashType(b *builder) error {
	if st := b.int("stash_type", 1); st != 1 {
		return unsupportedf("stash_type=%d is not supported", st)
	}
	return nil
}

// normRows reads the input of LayerNormalization or RMSNormalization:
// X, its shape, the first normalized axis and the scale (input 1, called
// scaleName by the op) broadcast to the normalized shape.
func normRows(in []*tensor.Tensor, axis int64, scaleName string) (x []float32, xs []int, ax int, scale []float32, err error) {
	if x, err = floats(in[0], "X"); err != nil {
		return nil, nil, 0, nil, err
	}
	xs = in[0].Shape
	if ax, err = normAxis(axis, len(xs)); err != nil {
		return nil, nil, 0, nil, err
	}
	if scale, err = normParam(in[1], scaleName, xs[ax:]); err != nil {
		return nil, nil, 0, nil, err
	}
	return x, xs, ax, scale, nil
}

func buildLayerNorm(b *builder) (kernel, error) {
	axis, eps := b.int("axis", -1), b.float("epsilon", 1e-5)
	if err := checkStashType(b); err != nil {
		return nil, err
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, xs, ax, scale, err := normRows(in, axis, "Scale")
		if err != nil {
			return nil, err
		}
		rows, n := tensor.NumElements(xs[:ax]), tensor.NumElements(xs[ax:])
		var bias []float32
		if len(in) > 2 && in[2] != nil {
			if bias, err = normParam(in[2], "B", xs[ax:]); err != nil {
				return nil, err
			}
		}
		out := rc.newFloatOut(xs...)
		statShape := slices.Clone(xs)
		for i := ax; i < len(statShape); i++ {
			statShape[i] = 1
		}
		mean, inv := tensor.New(tensor.Float, statShape...), tensor.New(tensor.Float, statShape...)
		o, mu, is := out.Float32s(), mean.Float32s(), inv.Float32s()
		kernels.Parallel(rc.threads, rows, max(1, parGrain/max(1, n)), func(lo, hi int) {
			kernels.LayerNorm(x[lo*n:hi*n], o[lo*n:hi*n], hi-lo, n, scale, bias, eps, mu[lo:hi], is[lo:hi])
		})
		return []*tensor.Tensor{out, mean, inv}, nil
	}, nil
}

// buildRMSNorm builds RMSNormalization: each row of the axes from axis on
// divided by its root mean square √(Σx²/n + eps), then multiplied by scale
// (broadcast to the row):
//
//	y = float32(float32(x · 1/√(Σx²/n + eps)) · scale[j])
//
// rounded as LayerNormalization rounds its normalized value and its
// product with Scale. The squares are summed in float64: a float32 sum
// loses low bits in proportion to the row's length, and a float32 square
// overflows once |x| passes 1.8e19, where the root mean square is still a
// float32. Rows are split over the run's threads.
func buildRMSNorm(b *builder) (kernel, error) {
	axis, eps := b.int("axis", -1), b.float("epsilon", 1e-5)
	if err := checkStashType(b); err != nil {
		return nil, err
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, xs, ax, scale, err := normRows(in, axis, "scale")
		if err != nil {
			return nil, err
		}
		rows, n := tensor.NumElements(xs[:ax]), tensor.NumElements(xs[ax:])
		out := rc.newFloatOut(xs...)
		y := out.Float32s()
		kernels.Parallel(rc.threads, rows, max(1, parGrain/max(1, n)), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
				var sq float64
				for _, v := range xr {
					sq += float64(v) * float64(v)
				}
				inv := 1 / math.Sqrt(sq/float64(n)+float64(eps))
				for j, v := range xr {
					yr[j] = float32(float32(float64(v)*inv) * scale[j])
				}
			}
		})
		return one(out), nil
	}, nil
}

// normParam reads input t, named what, of LayerNormalization or
// RMSNormalization as one value per element of a normalized row of shape
// row: as it is when it has that many elements, broadcast to the row when
// it is smaller and broadcastable to it.
func normParam(t *tensor.Tensor, what string, row []int) ([]float32, error) {
	p, err := floats(t, what)
	if err != nil {
		return nil, err
	}
	p = broadcastParam(p, t.Shape, row)
	if len(p) != tensor.NumElements(row) {
		return nil, fmt.Errorf("input %s %v does not fit the normalized shape %v", what, t.Shape, row)
	}
	return p, nil
}

// broadcastParam expands a parameter to the normalized shape when it is
// broadcastable to it but smaller; otherwise it returns p as it is. Leading
// axes of size 1 beyond the normalized rank broadcast away, as they would
// against the input.
func broadcastParam(p []float32, ps, want []int) []float32 {
	if len(p) == tensor.NumElements(want) {
		return p
	}
	for len(ps) > len(want) && ps[0] == 1 {
		ps = ps[1:]
	}
	if bs, err := broadcastShape(ps, want); err != nil || !slices.Equal(bs, want) {
		return p
	}
	return expandTo(tensor.FromFloat32(p, ps...), want).Float32s()
}

// softmaxAxis reads the axis of Softmax, LogSoftmax and Hardmax. Before
// opset 13 (legacy) they flatten the input to 2-D at axis, 1 by default,
// and work on its rows; from 13 they work along axis, −1 by default.
func softmaxAxis(b *builder) (axis int64, legacy bool) {
	legacy = b.opset < 13
	def := int64(-1)
	if legacy {
		def = 1
	}
	return b.int("axis", def), legacy
}

// softmaxRows reads the input of Softmax, LogSoftmax or Hardmax as outer
// blocks of inner rows of dim values each, a row's values inner apart:
// along axis, or before opset 13 (legacy) the input flattened to 2-D at
// axis, whose rows are contiguous.
func softmaxRows(in *tensor.Tensor, axis int64, legacy bool) (x []float32, outer, dim, inner int, err error) {
	if x, err = floats(in, "input"); err != nil {
		return nil, 0, 0, 0, err
	}
	xs := in.Shape
	if len(xs) == 0 {
		xs = []int{1}
	}
	ax, err := normAxis(axis, len(xs))
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if legacy {
		dim = tensor.NumElements(xs[ax:])
		return x, len(x) / max(dim, 1), dim, 1, nil
	}
	return x, tensor.NumElements(xs[:ax]), xs[ax], tensor.NumElements(xs[ax+1:]), nil
}

func buildSoftmax(log bool) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		axis, legacy := softmaxAxis(b)
		return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			x, outer, dim, inner, err := softmaxRows(in[0], axis, legacy)
			if err != nil {
				return nil, err
			}
			out := rc.newFloatOut(in[0].Shape...)
			if inner == 1 {
				o := out.Float32s()
				kernels.Parallel(rc.threads, outer, max(1, parGrain/max(1, dim)), func(lo, hi int) {
					kernels.Softmax(x[lo*dim:hi*dim], o[lo*dim:hi*dim], hi-lo, dim, log)
				})
				return one(out), nil
			}
			row, res := make([]float32, dim), make([]float32, dim)
			y := out.Float32s()
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					for j := 0; j < dim; j++ {
						row[j] = x[(o*dim+j)*inner+i]
					}
					kernels.Softmax(row, res, 1, dim, log)
					for j := 0; j < dim; j++ {
						y[(o*dim+j)*inner+i] = res[j]
					}
				}
			}
			return one(out), nil
		}, nil
	}
}

// buildHardmax sets 1 where each row has its maximum and 0 elsewhere,
// choosing as NumPy's argmax does, which ONNX's reference uses: the first
// maximum on a tie, the first NaN if there is one. Rows are read as
// Softmax reads them (softmaxAxis).
func buildHardmax(b *builder) (kernel, error) {
	axis, legacy := softmaxAxis(b)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, outer, dim, inner, err := softmaxRows(in[0], axis, legacy)
		if err != nil {
			return nil, err
		}
		out := rc.newFloat(in[0].Shape...)
		if dim == 0 {
			return one(out), nil
		}
		y := out.Float32s()
		for o := 0; o < outer; o++ {
			for i := 0; i < inner; i++ {
				first := o*dim*inner + i
				best := first
				for p := first + inner; p < first+dim*inner; p += inner {
					if x[p] > x[best] || x[p] != x[p] && x[best] == x[best] {
						best = p
					}
				}
				y[best] = 1
			}
		}
		return one(out), nil
	}, nil
}

// buildLRN builds LRN: each element divided by (bias + alpha/size ·
// the sum of squares over the channels around its own)^beta, the
// window reaching ⌊(size−1)/2⌋ channels below and ⌈(size−1)/2⌉ above,
// cut at the first and last channel. Channel planes are split over the
// run's threads.
func buildLRN(b *builder) (kernel, error) {
	size := int(b.int("size", 0))
	if size <= 0 {
		return nil, fmt.Errorf("size %d is not positive", size)
	}
	alpha, beta, bias := b.float("alpha", 1e-4), b.float("beta", 0.75), b.float("bias", 1)
	below, above := (size-1)/2, size/2
	pow := func(s float64) float64 { return math.Pow(s, float64(beta)) }
	if beta == 0.75 {
		// The classic CNNs' beta: two square roots are several times
		// faster than math.Pow and as exact once rounded to float32.
		pow = func(s float64) float64 {
			r := math.Sqrt(s)
			return r * math.Sqrt(r)
		}
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		if len(xs) < 2 {
			return nil, fmt.Errorf("input X %v must have a batch and a channel axis", xs)
		}
		c, sp := xs[1], tensor.NumElements(xs[2:])
		out := rc.newFloatOut(xs...)
		y := out.Float32s()
		kernels.Parallel(rc.threads, xs[0]*c, max(1, parGrain/max(1, sp*size)), func(lo, hi int) {
			sq := make([]float64, sp)
			for p := lo; p < hi; p++ {
				n, ch := p/c, p%c
				clear(sq)
				for j := max(0, ch-below); j <= min(c-1, ch+above); j++ {
					for q, v := range x[(n*c+j)*sp : (n*c+j+1)*sp] {
						sq[q] += float64(v) * float64(v)
					}
				}
				for q, v := range x[p*sp : (p+1)*sp] {
					scale := float64(bias) + float64(alpha)/float64(size)*sq[q]
					y[p*sp+q] = float32(float64(v) / pow(scale))
				}
			}
		})
		return one(out), nil
	}, nil
}

// mvnEpsilon is what MeanVarianceNormalization's function body adds to
// the standard deviation before dividing by it.
const mvnEpsilon = 1e-9

// buildMVN builds MeanVarianceNormalization: (X − mean) / (std + 1e-9),
// the mean and the population standard deviation taken over axes ([0, 2,
// 3] by default) for each position along the other axes, as the op's
// function body defines it. The statistics are float64 and the variance
// is taken around the mean (two passes): the body's E[X²] − E[X]² in
// float32 cancels to noise when the mean is large against the spread.
func buildMVN(b *builder) (kernel, error) {
	axes := []int64{0, 2, 3}
	if b.has("axes") {
		// An empty list reduces over every axis, as ReduceMean's empty
		// axes do in the function body.
		axes = b.ints("axes")
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := floats(in[0], "X")
		if err != nil {
			return nil, err
		}
		xs := in[0].Shape
		r := len(xs)
		// ks is the shape of the statistics: 1 on the reduced axes.
		ks := slices.Clone(xs)
		if len(axes) == 0 {
			for i := range ks {
				ks[i] = 1
			}
		}
		for _, a := range axes {
			ax, err := normAxis(a, r)
			if err != nil {
				return nil, err
			}
			ks[ax] = 1
		}
		groups := tensor.NumElements(ks)
		out := rc.newFloatOut(xs...)
		if len(x) == 0 {
			return one(out), nil
		}
		// group[i] is the statistics element input element i belongs to.
		group := make([]int, len(x))
		st := bcastStrides(ks, xs)
		pos := make([]int, r)
		for i, g := 0, 0; i < len(x); i++ {
			group[i] = g
			for d := r - 1; d >= 0; d-- {
				pos[d]++
				g += st[d]
				if pos[d] < xs[d] {
					break
				}
				g -= st[d] * xs[d]
				pos[d] = 0
			}
		}
		cnt := float64(len(x) / groups)
		mean, dev := make([]float64, groups), make([]float64, groups)
		for i, v := range x {
			mean[group[i]] += float64(v)
		}
		for g := range mean {
			mean[g] /= cnt
		}
		for i, v := range x {
			d := float64(v) - mean[group[i]]
			dev[group[i]] += d * d
		}
		for g := range dev {
			dev[g] = math.Sqrt(dev[g]/cnt) + mvnEpsilon
		}
		y := out.Float32s()
		for i, v := range x {
			y[i] = float32((float64(v) - mean[group[i]]) / dev[group[i]])
		}
		return one(out), nil
	}, nil
}

func preluKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := floats(in[0], "X")
	if err != nil {
		return nil, err
	}
	s, err := floats(in[1], "slope")
	if err != nil {
		return nil, err
	}
	sshape := in[1].Shape
	// Opset 6 and older allow a per-channel slope of shape [C] for N-D inputs.
	if len(sshape) == 1 && len(in[0].Shape) > 2 && sshape[0] == in[0].Shape[1] && sshape[0] != in[0].Shape[len(in[0].Shape)-1] {
		sshape = []int{sshape[0]}
		for range in[0].Shape[2:] {
			sshape = append(sshape, 1)
		}
	}
	os, err := broadcastShape(in[0].Shape, sshape)
	if err != nil {
		return nil, err
	}
	out := tensor.New(tensor.Float, os...)
	binaryLoop(x, in[0].Shape, s, sshape, out.Float32s(), os, func(v, a float32) float32 {
		if v < 0 {
			return v * a
		}
		return v
	})
	return one(out), nil
}
