package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/coreaiq/coreaiq/pkg/config"
)

// paletteDoc is one weight of `inspect --config` under a
// kmeans_palettization_config.
type paletteDoc struct {
	Node   string      `json:"node"`
	Tensor string      `json:"tensor"`
	Shape  []int       `json:"shape"`
	Rule   config.Rule `json:"rule"`
	// Palettization is nil when the weight stays float (Reason says why).
	Palettization *paletteSettingsDoc `json:"palettization,omitempty"`
	Reason        string              `json:"reason,omitempty"`
}

type paletteSettingsDoc struct {
	NBits                 int    `json:"n_bits"`
	Granularity           string `json:"granularity"`
	GroupSize             int    `json:"group_size,omitempty"`
	ChannelAxis           int    `json:"channel_axis"`
	Axis                  int    `json:"axis"`
	ClusterDim            int    `json:"cluster_dim"`
	EnablePerChannelScale bool   `json:"enable_per_channel_scale"`
	LUTDType              string `json:"lut_dtype"`
}

func paletteDocs(res *config.PaletteResolution) []paletteDoc {
	out := []paletteDoc{}
	for _, w := range res.Weights {
		d := paletteDoc{Node: w.Node.Name, Tensor: w.Value, Shape: w.Shape, Rule: w.Rule, Reason: w.Reason}
		if p := w.Palette; p != nil {
			d.Palettization = &paletteSettingsDoc{NBits: p.NBits, Granularity: p.Granularity.String(), GroupSize: p.GroupSize,
				ChannelAxis: p.ChannelAxis, Axis: w.Axis, ClusterDim: p.ClusterDim, EnablePerChannelScale: p.PerChannelScale,
				LUTDType: p.LUTDType.String()}
		}
		out = append(out, d)
	}
	return out
}

// writePaletteTable lists each weight's palettization (or why it stays
// float) and the rule that decided.
func writePaletteTable(w io.Writer, file string, res *config.PaletteResolution) error {
	fmt.Fprintf(w, "\npalettization (config %s)\n", file)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tweight\tshape\tpalettization\trule")
	for _, p := range res.Weights {
		what := "float: " + p.Reason
		if p.Palette != nil {
			what = fmt.Sprintf("%s (ONNX axis %d)", p.Palette, p.Axis)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%v\t%s\t%s\n", p.Node.Name, p.Value, p.Shape, what, p.Rule)
	}
	return tw.Flush()
}
