package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/plan"
)

// reportPalette is one palettized weight in the --report JSON.
type reportPalette struct {
	Value         string      `json:"value"`
	Nodes         []string    `json:"nodes"`
	Rule          config.Rule `json:"rule"`
	Palettization string      `json:"palettization"`
	Shape         []int       `json:"shape"`
	LUTs          int         `json:"luts"`
	LUTEntries    int         `json:"lut_entries"`
	ClusterDim    int         `json:"cluster_dim"`
	BitsPerWeight float64     `json:"bits_per_weight"`
	// SQNR is the weight's SQNR in dB ("inf" when exact).
	SQNR      compare.DB `json:"weight_sqnr_db"`
	DataAware bool       `json:"data_aware"`
}

// fileSizes are the bytes of the model before and after, external data
// included.
type fileSizes struct {
	Before int64 `json:"before_bytes"`
	After  int64 `json:"after_bytes"`
}

func reportPalettes(ps []*plan.PalettePlan) []reportPalette {
	var out []reportPalette
	for _, p := range ps {
		r := p.Report
		out = append(out, reportPalette{Value: p.Value, Nodes: p.Nodes, Rule: p.Rule, Palettization: p.Palette.String(),
			Shape: p.Shape, LUTs: r.LUTs, LUTEntries: r.Entries, ClusterDim: r.ClusterDim,
			BitsPerWeight: r.BitsPerWeight, SQNR: compare.DB(r.SQNR), DataAware: r.DataAware})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// modelBytes is the size of a model file and of the external data files
// its initializers name, 0 when it cannot be read.
func modelBytes(path string, m *onnxgraph.Model) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	n := st.Size()
	if m == nil {
		return n
	}
	seen := map[string]bool{}
	m.AllTensors(func(t *onnxpb.TensorProto) {
		ref, err := onnxgraph.ExternalRefOf(t)
		if err != nil || ref.Location == "" || seen[ref.Location] {
			return
		}
		seen[ref.Location] = true
		if st, err := os.Stat(filepath.Join(m.Dir, ref.Location)); err == nil {
			n += st.Size()
		}
	})
	return n
}

// writePaletteSummary prints the palettized weights, worst weight SQNR
// first, and the file sizes.
func writePaletteSummary(w io.Writer, r *report) {
	if len(r.Palettes) == 0 {
		return
	}
	ps := append([]reportPalette(nil), r.Palettes...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].SQNR < ps[j].SQNR })
	var bits, elems float64
	for _, p := range ps {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		bits += p.BitsPerWeight * float64(n)
		elems += float64(n)
	}
	fmt.Fprintf(w, "palettized\tweights %d\tbits/weight %.3f (LUTs included)\n", len(ps), bits/elems)
	for i, p := range ps {
		if i == maxTableSkips && len(ps) > maxTableSkips+1 {
			fmt.Fprintf(w, "palettized ... and %d more\tthe JSON report (--report) lists them all\n", len(ps)-i)
			break
		}
		fmt.Fprintf(w, "palettized %s\t%d×%d-entry LUT\t%.3f bits/weight\tweight SQNR %.2f dB\n",
			p.Value, p.LUTs, p.LUTEntries, p.BitsPerWeight, float64(p.SQNR))
	}
	if r.Size != nil && r.Size.Before > 0 {
		fmt.Fprintf(w, "file size\t%d → %d bytes (%.1f%%)\n", r.Size.Before, r.Size.After, 100*float64(r.Size.After)/float64(r.Size.Before))
	}
}
