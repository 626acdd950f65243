package calibrate

import (
	"fmt"
	"math"
	"strconv"
)

// Float is a float32 that survives JSON: ±Inf and NaN, which JSON numbers
// cannot hold, are written as the strings "inf", "-inf" and "nan". Finite
// values are written in the shortest form that reads back to the same
// float32.
type Float float32

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 32), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"nan"`:
		*f = Float(math.NaN())
		return nil
	case `"inf"`:
		*f = Float(math.Inf(1))
		return nil
	case `"-inf"`:
		*f = Float(math.Inf(-1))
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 32)
	if err != nil {
		return fmt.Errorf("not a float32: %s", b)
	}
	*f = Float(v)
	return nil
}

func fromFloats(x []Float) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}
