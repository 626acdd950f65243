package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/plan"
)

// PaletteWeight is one palettized weight of a candidate, as the node that
// rebuilds it records (finalize.PaletteMetadataKey).
type PaletteWeight struct {
	Weight string `json:"weight"`
	// Consumers are the nodes that read the weight.
	Consumers     []string `json:"consumers"`
	LUTs          int      `json:"luts"`
	Entries       int      `json:"lut_entries"`
	ClusterDim    int      `json:"cluster_dim"`
	BitsPerWeight float64  `json:"bits_per_weight"`
	SQNR          DB       `json:"weight_sqnr_db"`
	DataAware     bool     `json:"data_aware"`
	Rule          string   `json:"rule,omitempty"`
}

// PalettizedWeights lists the palettized weights of cand in topological
// order, from the metadata of the nodes that rebuild them.
func PalettizedWeights(cand *onnxgraph.Model) ([]PaletteWeight, error) {
	var out []PaletteWeight
	for _, n := range cand.Graph.Nodes {
		meta, ok := n.Metadata(finalize.PaletteMetadataKey)
		if !ok || len(n.Outputs) != 1 || n.Outputs[0] == nil {
			continue
		}
		var r plan.PaletteReport
		if err := json.Unmarshal([]byte(meta), &r); err != nil {
			return nil, fmt.Errorf("%s: %s metadata: %w", n, finalize.PaletteMetadataKey, err)
		}
		v := n.Outputs[0]
		pw := PaletteWeight{Weight: v.Name, LUTs: r.LUTs, Entries: r.Entries, ClusterDim: r.ClusterDim,
			BitsPerWeight: r.BitsPerWeight, SQNR: DB(r.SQNR), DataAware: r.DataAware}
		pw.Rule, _ = n.Metadata(RuleMetadataKey)
		for _, c := range v.Consumers {
			pw.Consumers = append(pw.Consumers, c.Name)
		}
		out = append(out, pw)
	}
	return out, nil
}

// writePalettized lists the palettized weights.
func (r *Report) writePalettized(w io.Writer) error {
	fmt.Fprintf(w, "palettized weights (%d):\n", len(r.Palettized))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  weight SQNR dB\tweight\tLUTs\tbits/weight\tread by\trule")
	for _, p := range r.Palettized {
		lut := fmt.Sprintf("%d×%d", p.LUTs, p.Entries)
		if p.ClusterDim > 1 {
			lut += fmt.Sprintf("×%d", p.ClusterDim)
		}
		if p.DataAware {
			lut += " (data-aware)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%.3f\t%v\t%s\n", p.SQNR, p.Weight, lut, p.BitsPerWeight, p.Consumers, p.Rule)
	}
	return tw.Flush()
}
