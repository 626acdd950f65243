package kernels

// BinOp names a float32 arithmetic operation of the binary kernels.
type BinOp uint8

// The binary operations: IEEE single-precision add, subtract, multiply and
// divide, one rounding each.
const (
	BinAdd BinOp = iota + 1
	BinSub
	BinMul
	BinDiv
)

// Apply returns a op b.
func (op BinOp) Apply(a, b float32) float32 {
	switch op {
	case BinAdd:
		return a + b
	case BinSub:
		return a - b
	case BinMul:
		return a * b
	default:
		return a / b
	}
}

// Binary sets o[i] = a[i] op b[i] for i < len(o); a and b are at least as
// long as o. o may be a or b, but must not overlap them otherwise.
func Binary(op BinOp, o, a, b []float32) {
	n := binaryVec(op, o, a[:len(o)], b[:len(o)])
	binaryGo(op, o[n:], a[n:len(o)], b[n:len(o)])
}

// BinaryScalar sets o[i] = a[i] op s, or s op a[i] when rev is true. o may
// be a, but must not overlap it otherwise.
func BinaryScalar(op BinOp, o, a []float32, s float32, rev bool) {
	n := binaryScalarVec(op, o, a[:len(o)], s, rev)
	binaryScalarGo(op, o[n:], a[n:len(o)], s, rev)
}

// binaryGo is Binary in Go. The switch sits outside the loops so that each
// loop is a plain load-op-store the compiler keeps free of calls and
// bounds checks.
func binaryGo(op BinOp, o, a, b []float32) {
	a, b = a[:len(o)], b[:len(o)]
	switch op {
	case BinAdd:
		for i := range o {
			o[i] = a[i] + b[i]
		}
	case BinSub:
		for i := range o {
			o[i] = a[i] - b[i]
		}
	case BinMul:
		for i := range o {
			o[i] = a[i] * b[i]
		}
	default:
		for i := range o {
			o[i] = a[i] / b[i]
		}
	}
}

// binaryScalarGo is BinaryScalar in Go.
func binaryScalarGo(op BinOp, o, a []float32, s float32, rev bool) {
	a = a[:len(o)]
	switch {
	case op == BinAdd:
		for i := range o {
			o[i] = a[i] + s
		}
	case op == BinMul:
		for i := range o {
			o[i] = a[i] * s
		}
	case op == BinSub && !rev:
		for i := range o {
			o[i] = a[i] - s
		}
	case op == BinSub:
		for i := range o {
			o[i] = s - a[i]
		}
	case !rev:
		for i := range o {
			o[i] = a[i] / s
		}
	default:
		for i := range o {
			o[i] = s / a[i]
		}
	}
}
