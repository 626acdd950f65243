package spec

import (
	"fmt"
	"sort"
	"strings"
)

// QScheme is how the quantization grid sits around zero.
type QScheme uint8

// The schemes. The zero value means "not given" and resolves to Symmetric,
// the guide's default.
const (
	QSchemeAuto QScheme = iota
	// Symmetric uses the full range ([-128, 127] for int8) with
	// scale = absmax / 127.5 and zero point 0 (128 for uint8): torch and
	// coreai-opt's convention.
	Symmetric
	// Asymmetric fits [min(min,0), max(max,0)] onto [qmin, qmax].
	Asymmetric
	// SymmetricWithClipping is the restricted-range symmetric scheme:
	// [-127, 127] for int8 with scale = absmax / 127, the ONNX Runtime and
	// TensorRT convention (coreai-opt calls it SYMMETRIC_WITH_CLIPPING).
	SymmetricWithClipping
)

var qschemeNames = [...]string{"auto", "symmetric", "asymmetric", "symmetric_with_clipping"}

// String returns the config spelling.
func (q QScheme) String() string {
	if int(q) < len(qschemeNames) {
		return qschemeNames[q]
	}
	return fmt.Sprintf("qscheme(%d)", int(q))
}

// QSchemes lists the config spellings.
func QSchemes() []string { return qschemeNames[1:] }

// QSchemePrefix is the guide's prefix a qscheme may carry
// ("QuantizationScheme.symmetric").
const QSchemePrefix = "QuantizationScheme."

// qschemeSpellings are the lower-case names ParseQScheme reads.
var qschemeSpellings = map[string]QScheme{
	"symmetric": Symmetric, "asymmetric": Asymmetric,
	"symmetric_with_clipping": SymmetricWithClipping, "restricted_symmetric": SymmetricWithClipping,
}

// QSchemeSpellings lists the lower-case names ParseQScheme reads, sorted.
func QSchemeSpellings() []string { return sortedNames(qschemeSpellings) }

// ParseQScheme reads "symmetric", "asymmetric" or "symmetric_with_clipping"
// (also "restricted_symmetric"), with or without the guide's
// "QuantizationScheme." prefix, in any case.
func ParseQScheme(s string) (QScheme, error) {
	if q, ok := qschemeSpellings[strings.ToLower(strings.TrimPrefix(s, QSchemePrefix))]; ok {
		return q, nil
	}
	return QSchemeAuto, fmt.Errorf("unknown qscheme %q", s)
}

// GranularityType is the shape of the qparams.
type GranularityType uint8

// The granularities, coarsest first.
const (
	PerTensor GranularityType = iota
	PerChannel
	PerBlock
)

var granularityNames = [...]string{"per_tensor", "per_channel", "per_block"}

// String returns the config spelling.
func (g GranularityType) String() string {
	if int(g) < len(granularityNames) {
		return granularityNames[g]
	}
	return fmt.Sprintf("granularity(%d)", int(g))
}

// GranularityTypes lists the config spellings.
func GranularityTypes() []string { return granularityNames[:] }

// ParseGranularityType reads "per_tensor", "per_channel" or "per_block".
func ParseGranularityType(s string) (GranularityType, error) {
	for i, n := range granularityNames {
		if n == s {
			return GranularityType(i), nil
		}
	}
	return PerTensor, fmt.Errorf("unknown granularity type %q", s)
}

// Granularity is one scale (and zero point) per tensor, per channel along
// Axis, or per BlockSize consecutive elements along Axis.
type Granularity struct {
	Type GranularityType
	// Axis is nil when omitted: the default axis of the op's weight is
	// chosen at resolution (the guide's per-channel and per-block tables).
	// Negative values count from the last dimension.
	Axis *int
	// BlockSize is the number of elements per block (per_block only).
	BlockSize int
}

// String is a compact form: "per_tensor", "per_channel(axis=0)",
// "per_block(axis=1, block_size=32)".
func (g Granularity) String() string {
	var args []string
	if g.Type != PerTensor {
		if g.Axis != nil {
			args = append(args, fmt.Sprintf("axis=%d", *g.Axis))
		} else {
			args = append(args, "axis=default")
		}
	}
	if g.Type == PerBlock {
		args = append(args, fmt.Sprintf("block_size=%d", g.BlockSize))
	}
	if len(args) == 0 {
		return g.Type.String()
	}
	return g.Type.String() + "(" + strings.Join(args, ", ") + ")"
}

// CalculatorType is the algorithm that turns observations into qparams.
type CalculatorType uint8

// The calculators. CalculatorAuto (not given) resolves to Static for state
// tensors and MovingAverage for activations, as in coreai-opt.
const (
	CalculatorAuto CalculatorType = iota
	// Static is the running min/max (torch MinMaxObserver); also "minmax".
	Static
	// MovingAverage is running += c·(batch − running), first batch initialises.
	MovingAverage
	// GlobalMinMax is the min/max over all calibration data at once.
	GlobalMinMax
	Percentile
	Entropy
	MSE
)

var calculatorNames = [...]string{"auto", "static", "moving_average", "global_minmax", "percentile", "entropy", "mse"}

// String returns the config spelling.
func (c CalculatorType) String() string {
	if int(c) < len(calculatorNames) {
		return calculatorNames[c]
	}
	return fmt.Sprintf("calculator(%d)", int(c))
}

// CalculatorTypes lists the config spellings.
func CalculatorTypes() []string { return calculatorNames[1:] }

// ParseCalculatorType reads a calculator name; "minmax" is Static, and the
// coreai-opt class names (StaticQParamsCalculator,
// MovingAverageQParamsCalculator, GlobalMinMaxQParamsCalculator) are accepted.
func ParseCalculatorType(s string) (CalculatorType, error) {
	if c, ok := calculatorSpellings[s]; ok {
		return c, nil
	}
	return CalculatorAuto, fmt.Errorf("unknown qparam calculator %q", s)
}

// calculatorSpellings are the names ParseCalculatorType reads.
var calculatorSpellings = map[string]CalculatorType{
	"static": Static, "minmax": Static, "min_max": Static, "StaticQParamsCalculator": Static,
	"moving_average": MovingAverage, "moving_average_minmax": MovingAverage, "MovingAverageQParamsCalculator": MovingAverage,
	"global_minmax": GlobalMinMax, "global_min_max": GlobalMinMax, "GlobalMinMaxQParamsCalculator": GlobalMinMax,
	"percentile": Percentile, "entropy": Entropy, "mse": MSE,
}

// CalculatorSpellings lists every name ParseCalculatorType reads, sorted.
func CalculatorSpellings() []string { return sortedNames(calculatorSpellings) }

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Calculator parameter defaults.
const (
	DefaultAveragingConstant = 0.01
	DefaultPercentile        = 99.999
	DefaultNumBins           = 2048
)

// Calculator is a qparam calculator with its parameters. Parameters that do
// not apply to Type are zero.
type Calculator struct {
	Type CalculatorType
	// AveragingConstant is c of MovingAverage (default 0.01).
	AveragingConstant float64
	// Percentile is the kept percentile of Percentile (default 99.999).
	Percentile float64
	// NumBins is the histogram size of Percentile, Entropy and MSE (default 2048).
	NumBins int
}

// WithDefaults fills the parameters of c.Type that are zero.
func (c Calculator) WithDefaults() Calculator {
	switch c.Type {
	case MovingAverage:
		if c.AveragingConstant == 0 {
			c.AveragingConstant = DefaultAveragingConstant
		}
	case Percentile:
		if c.Percentile == 0 {
			c.Percentile = DefaultPercentile
		}
		if c.NumBins == 0 {
			c.NumBins = DefaultNumBins
		}
	case Entropy, MSE:
		if c.NumBins == 0 {
			c.NumBins = DefaultNumBins
		}
	}
	return c
}

// String is a compact form: "moving_average(c=0.01)".
func (c Calculator) String() string {
	switch c.Type {
	case MovingAverage:
		return fmt.Sprintf("moving_average(c=%g)", c.AveragingConstant)
	case Percentile:
		return fmt.Sprintf("percentile(%g, bins=%d)", c.Percentile, c.NumBins)
	case Entropy, MSE:
		return fmt.Sprintf("%s(bins=%d)", c.Type, c.NumBins)
	}
	return c.Type.String()
}

// QuantizationSpec describes how one tensor is quantized.
type QuantizationSpec struct {
	DType       DType
	QScheme     QScheme
	Granularity Granularity
	Calculator  Calculator
	// ScaleDType is DTypeAuto when picked from DType (float32).
	ScaleDType DType
}

// DefaultActivationSpec is coreai-opt's default_activation_quantization_spec:
// int8, symmetric, per tensor, moving-average qparams.
func DefaultActivationSpec() *QuantizationSpec {
	return &QuantizationSpec{DType: Int8, QScheme: Symmetric,
		Granularity: Granularity{Type: PerTensor},
		Calculator:  Calculator{Type: MovingAverage, AveragingConstant: DefaultAveragingConstant}}
}

// DefaultWeightSpec is coreai-opt's default_weight_quantization_spec: int8,
// symmetric, per channel on the op's default axis, static qparams.
func DefaultWeightSpec() *QuantizationSpec {
	return &QuantizationSpec{DType: Int8, QScheme: Symmetric,
		Granularity: Granularity{Type: PerChannel},
		Calculator:  Calculator{Type: Static}}
}

// Clone returns a deep copy.
func (s *QuantizationSpec) Clone() *QuantizationSpec {
	if s == nil {
		return nil
	}
	c := *s
	if s.Granularity.Axis != nil {
		a := *s.Granularity.Axis
		c.Granularity.Axis = &a
	}
	return &c
}

// Equal reports whether two specs are the same (nil equals nil).
func (s *QuantizationSpec) Equal(o *QuantizationSpec) bool {
	if s == nil || o == nil {
		return s == o
	}
	if (s.Granularity.Axis == nil) != (o.Granularity.Axis == nil) ||
		(s.Granularity.Axis != nil && *s.Granularity.Axis != *o.Granularity.Axis) {
		return false
	}
	a, b := *s, *o
	a.Granularity.Axis, b.Granularity.Axis = nil, nil
	return a == b
}

// Resolved returns a copy with every "auto" filled in: qscheme symmetric,
// calculator static for state tensors and moving_average for activations
// (with parameter defaults), scale dtype float32.
func (s *QuantizationSpec) Resolved(state bool) *QuantizationSpec {
	c := s.Clone()
	if c.QScheme == QSchemeAuto {
		c.QScheme = Symmetric
	}
	if c.Calculator.Type == CalculatorAuto {
		c.Calculator.Type = MovingAverage
		if state {
			c.Calculator.Type = Static
		}
	}
	c.Calculator = c.Calculator.WithDefaults()
	if c.ScaleDType == DTypeAuto {
		c.ScaleDType = Float32
	}
	return c
}

// Validate checks the combinations a spec cannot have on its own, whatever
// tensor it is applied to.
func (s *QuantizationSpec) Validate() error {
	if !s.DType.IsData() {
		return fmt.Errorf("dtype %s cannot hold quantized data", s.DType)
	}
	if s.ScaleDType != DTypeAuto && !s.ScaleDType.IsScale() {
		return fmt.Errorf("scale_dtype %s cannot hold scales (want float32, float16, bfloat16 or float8_e8m0fnu)", s.ScaleDType)
	}
	if s.DType.IsFloat() && (s.QScheme == Asymmetric || s.QScheme == SymmetricWithClipping) {
		return fmt.Errorf("qscheme %s needs an integer dtype, not %s", s.QScheme, s.DType)
	}
	if s.Granularity.Type == PerBlock && s.Granularity.BlockSize <= 0 {
		return fmt.Errorf("per_block granularity needs block_size > 0, got %d", s.Granularity.BlockSize)
	}
	if s.Granularity.Type != PerBlock && s.Granularity.BlockSize != 0 {
		return fmt.Errorf("block_size applies to per_block granularity only, not %s", s.Granularity.Type)
	}
	if s.Granularity.Type == PerTensor && s.Granularity.Axis != nil {
		return fmt.Errorf("axis applies to per_channel and per_block granularity only")
	}
	return nil
}

// String is a one-line description: "int8 symmetric per_tensor
// moving_average(c=0.01)", with the scale dtype when it is not float32.
func (s *QuantizationSpec) String() string {
	if s == nil {
		return "none"
	}
	parts := []string{s.DType.String(), s.QScheme.String(), s.Granularity.String(), s.Calculator.String()}
	if s.ScaleDType != DTypeAuto && s.ScaleDType != Float32 {
		parts = append(parts, "scale="+s.ScaleDType.String())
	}
	return strings.Join(parts, " ")
}
