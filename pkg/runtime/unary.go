package runtime

import (
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

func isNaNKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := asFloat32(in[0])
	if err != nil {
		return nil, err
	}
	out := tensor.New(tensor.Bool, in[0].Shape...)
	o := out.Data.([]bool)
	for i, v := range x {
		o[i] = v != v
	}
	return one(out), nil
}

func buildIsInf(b *builder) (kernel, error) {
	pos, neg := b.int("detect_positive", 1) != 0, b.int("detect_negative", 1) != 0
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		x, err := asFloat32(in[0])
		if err != nil {
			return nil, err
		}
		out := tensor.New(tensor.Bool, in[0].Shape...)
		o := out.Data.([]bool)
		for i, v := range x {
			o[i] = pos && math.IsInf(float64(v), 1) || neg && math.IsInf(float64(v), -1)
		}
		return one(out), nil
	}, nil
}

// buildAlphaUnary covers the activations with one alpha attribute.
func buildAlphaUnary(op string, def float32) func(b *builder) (kernel, error) {
	return func(b *builder) (kernel, error) {
		alpha := b.float("alpha", def)
		var f func(x float32) float32
		switch op {
		case "LeakyRelu":
			f = func(x float32) float32 {
				if x < 0 {
					return alpha * x
				}
				return x
			}
		case "Elu":
			f = func(x float32) float32 {
				if x < 0 {
					return alpha * float32(math.Expm1(float64(x)))
				}
				return x
			}
		case "Celu":
			f = func(x float32) float32 {
				return max(0, x) + min(0, alpha*float32(math.Expm1(float64(x/alpha))))
			}
		case "ThresholdedRelu":
			f = func(x float32) float32 {
				if x > alpha {
					return x
				}
				return 0
			}
		}
		return unaryFloat(f), nil
	}
}

func buildSelu(b *builder) (kernel, error) {
	alpha := b.float("alpha", 1.67326319217681884765625)
	gamma := b.float("gamma", 1.05070102214813232421875)
	return unaryFloat(func(x float32) float32 {
		if x <= 0 {
			return gamma * alpha * float32(math.Expm1(float64(x)))
		}
		return gamma * x
	}), nil
}

func buildHardSigmoid(b *builder) (kernel, error) {
	alpha, beta := b.float("alpha", 0.2), b.float("beta", 0.5)
	return unaryFloat(func(x float32) float32 { return min(max(alpha*x+beta, 0), 1) }), nil
}

// buildShrink builds Shrink: x + bias below −lambd, x − bias above lambd,
// 0 between. Integer inputs are computed in float64 and truncated back to
// their type, as ONNX's reference computes them.
func buildShrink(b *builder) (kernel, error) {
	bias, lambd := b.float("bias", 0), b.float("lambd", 0.5)
	fk := unaryFloat(func(x float32) float32 {
		switch {
		case x < -lambd:
			return x + bias
		case x > lambd:
			return x - bias
		}
		return 0
	})
	bi, la := float64(bias), float64(lambd)
	return signedKernel(fk, func(v int64) int64 {
		switch x := float64(v); {
		case x < -la:
			return int64(x + bi)
		case x > la:
			return int64(x - bi)
		}
		return 0
	}), nil
}

func buildGelu(b *builder) (kernel, error) {
	switch approx := b.str("approximate", "none"); approx {
	case "none":
		return unaryFloat(func(x float32) float32 {
			return float32(0.5 * float64(x) * (1 + float64(kernels.Erf32(float32(float64(x)/math.Sqrt2)))))
		}), nil
	case "tanh":
		return unaryFloat(func(x float32) float32 {
			v := float64(x)
			return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
		}), nil
	default:
		return nil, unsupportedf("approximate=%q is not supported", approx)
	}
}

func buildClip(b *builder) (kernel, error) {
	if b.opset < 11 {
		return clipKernel(b.float("min", float32(math.Inf(-1))), b.float("max", float32(math.Inf(1))), false), nil
	}
	return clipKernel(0, 0, true), nil
}

func identityKernel(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return one(in[0]), nil
}

// buildDropout is the inference form: the output is the input and the
// mask, when asked for, is all true.
func buildDropout(b *builder) (kernel, error) {
	wantMask := len(b.n.Outputs) > 1 && b.n.Outputs[1] != nil
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		if len(in) > 2 && in[2] != nil {
			if m, ok := in[2].Data.([]bool); ok && len(m) == 1 && m[0] {
				// Training dropout is random; only ratio 0 is deterministic.
				ratio := 0.5
				if len(in) > 1 && in[1] != nil {
					r, err := scalarFloat(in[1])
					if err != nil {
						return nil, fmt.Errorf("ratio: %w", err)
					}
					ratio = r
				}
				if ratio != 0 {
					return nil, fmt.Errorf("training_mode=true with ratio %g is not supported (random)", ratio)
				}
			}
		}
		if !wantMask {
			return one(in[0]), nil
		}
		mask := tensor.New(tensor.Bool, in[0].Shape...)
		for i := range mask.Data.([]bool) {
			mask.Data.([]bool)[i] = true
		}
		return []*tensor.Tensor{in[0], mask}, nil
	}, nil
}

func buildConstant(b *builder) (kernel, error) {
	v := b.n.Outputs[0]
	if v == nil || v.Const == nil {
		return nil, unsupportedf("sparse_value constants are not supported")
	}
	t, err := b.c.constTensor(v)
	if err != nil {
		return nil, err
	}
	return func(*runCtx, []*tensor.Tensor) ([]*tensor.Tensor, error) { return one(t), nil }, nil
}

// castKernel casts to `to`. Casts to float16, bfloat16 and double produce
// float32 holding values the target type can represent.
func castKernel(to tensor.DType, saturate bool) kernel {
	return func(_ *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		t := in[0]
		switch to {
		case tensor.Float16, tensor.BFloat16:
			narrow, err := castTensor(t, to)
			if err != nil {
				return nil, err
			}
			out, err := castTensor(narrow, tensor.Float)
			return one(out), err
		case tensor.Double:
			out, err := castTensor(t, tensor.Float)
			return one(out), err
		case tensor.Float8E4M3FN, tensor.Float8E4M3FNUZ, tensor.Float8E5M2, tensor.Float8E5M2FNUZ:
			f, err := asFloat32(t)
			if err != nil {
				return nil, err
			}
			out := tensor.New(to, t.Shape...)
			err = encodeNarrowFloat(to, f, out.Data.([]uint8), saturate)
			return one(out), err
		}
		out, err := castTensor(t, to)
		return one(out), err
	}
}

func buildCast(b *builder) (kernel, error) {
	to := tensor.DType(b.int("to", 0))
	if !to.Valid() || to == tensor.Complex64 || to == tensor.Complex128 {
		return nil, unsupportedf("cast to %s is not supported", to)
	}
	return castKernel(to, b.int("saturate", 1) != 0), nil
}

func buildCastLike(b *builder) (kernel, error) {
	to := b.n.Inputs[1].DType()
	if to == tensor.Undefined {
		return nil, unsupportedf("the type of input target_type is not declared")
	}
	k := castKernel(to, b.int("saturate", 1) != 0)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) { return k(rc, in[:1]) }, nil
}
