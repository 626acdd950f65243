package plan

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/coreaiq/coreaiq/pkg/config"
)

// PalettePlan is one weight the plan palettizes: its n-bit indices into
// lookup tables replace it (kmeans_palettization_config).
type PalettePlan struct {
	Value string      `json:"value"`
	Nodes []string    `json:"nodes"`
	Rule  config.Rule `json:"rule"`
	// Palette holds the settings (n_bits, granularity, ...).
	Palette *config.Palettization `json:"-"`
	Shape   []int                 `json:"shape"`
	// Axis is the ONNX axis of channel_axis; ScaleAxis the output-channel
	// axis of the per-channel scale.
	Axis      int `json:"axis"`
	ScaleAxis int `json:"scale_axis"`
	// FloatType is the ONNX element type of the weight.
	FloatType int32 `json:"float_type"`
	// InputAxis is the weight axis that meets the node's input channels
	// (-1: none, as for an embedding table). Data-aware palettization
	// weighs each element's error by its input channel's second moment.
	InputAxis int `json:"input_axis"`
	// Input is the activation the weight multiplies, "" for none;
	// ActivationAxis its channel axis and Groups a Conv's group count.
	Input          string `json:"input,omitempty"`
	ActivationAxis int    `json:"activation_axis,omitempty"`
	Groups         int    `json:"groups,omitempty"`
	// InputMoments are E[x²] per channel of Input from calibration, nil
	// without (plain k-means); the qparams pass sets them.
	InputMoments []float32 `json:"-"`
	// Report is filled in by Write.
	Report *PaletteReport `json:"report,omitempty"`
}

// PaletteReport is what one palettized weight cost.
type PaletteReport struct {
	// LUTs is the number of lookup tables, Entries each one's entries
	// (2^n_bits) and ClusterDim their length.
	LUTs       int `json:"luts"`
	Entries    int `json:"entries"`
	ClusterDim int `json:"cluster_dim"`
	// BitsPerWeight counts the indices, the LUTs (with their scales) and
	// the per-channel scales, over the weight's elements.
	BitsPerWeight float64 `json:"bits_per_weight"`
	// SQNR of the palettized weight against the float one, in dB
	// (+Inf when exact, which JSON writes as Exact with no sqnr_db).
	SQNR float64 `json:"-"`
	// DataAware is set when the clustering was weighted by input moments.
	DataAware bool `json:"data_aware"`
}

// MarshalJSON writes the SQNR as weight_sqnr_db, or exact: true when the
// weight is rebuilt exactly (JSON has no infinity).
func (r PaletteReport) MarshalJSON() ([]byte, error) {
	type plain PaletteReport
	out := struct {
		plain
		SQNR  *float64 `json:"weight_sqnr_db,omitempty"`
		Exact bool     `json:"exact,omitempty"`
	}{plain: plain(r)}
	if math.IsInf(r.SQNR, 1) {
		out.Exact = true
	} else {
		s := math.Round(r.SQNR*1e4) / 1e4
		out.SQNR = &s
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *PaletteReport) UnmarshalJSON(b []byte) error {
	type plain PaletteReport
	var in struct {
		plain
		SQNR  *float64 `json:"weight_sqnr_db"`
		Exact bool     `json:"exact"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = PaletteReport(in.plain)
	switch {
	case in.Exact:
		r.SQNR = math.Inf(1)
	case in.SQNR != nil:
		r.SQNR = *in.SQNR
	default:
		return fmt.Errorf("palette report without weight_sqnr_db or exact")
	}
	return nil
}
