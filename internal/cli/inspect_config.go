package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// inspectConfigDoc is `inspect --config` in JSON/YAML: the model summary
// with each node extended by its resolved specs.
type inspectConfigDoc struct {
	*passes.ModelSummary
	Config string `json:"config"`
	// Nodes shadows ModelSummary.Nodes.
	Nodes []resolvedNode `json:"nodes"`
	// Palettization lists the weights under kmeans_palettization_config.
	Palettization []paletteDoc `json:"palettization,omitempty"`
}

type resolvedNode struct {
	passes.NodeInfo
	// Call is the torch op the node belongs to and every op name it
	// answers to.
	Call callDoc `json:"call"`
	// ModuleRule locates the module config entry that applies.
	ModuleRule config.Rule `json:"module_rule"`
	// Quantization lists the quantized tensor slots of the node.
	Quantization []tensorSpecDoc `json:"quantization"`
	// NotQuantized lists the other slots with the reason.
	NotQuantized []tensorSpecDoc `json:"not_quantized"`
}

type callDoc struct {
	// OpType is the torch op type op_type_config keys match ("linear").
	OpType string `json:"op_type"`
	// Nodes are the ONNX nodes of the call (MatMul and its bias Add).
	Nodes []string `json:"nodes"`
	// GraphName and EagerName are the op_name_config names in graph and
	// eager execution mode.
	GraphName string `json:"graph_name,omitempty"`
	EagerName string `json:"eager_name"`
}

func newCallDoc(c *config.OpCall) callDoc {
	d := callDoc{OpType: c.Type, GraphName: c.GraphName, EagerName: c.EagerName}
	for _, n := range c.Nodes {
		d.Nodes = append(d.Nodes, n.Name)
	}
	return d
}

type tensorSpecDoc struct {
	Role   string      `json:"role"`
	Index  int         `json:"index"`
	Tensor string      `json:"tensor"`
	Key    string      `json:"key,omitempty"`
	Spec   *specDoc    `json:"spec,omitempty"`
	Rule   config.Rule `json:"rule"`
	Reason string      `json:"reason,omitempty"`
}

type specDoc struct {
	DType             string  `json:"dtype"`
	QScheme           string  `json:"qscheme"`
	Granularity       string  `json:"granularity"`
	Axis              *int    `json:"axis,omitempty"`
	BlockSize         int     `json:"block_size,omitempty"`
	QParamCalculator  string  `json:"qparam_calculator"`
	AveragingConstant float64 `json:"averaging_constant,omitempty"`
	Percentile        float64 `json:"percentile,omitempty"`
	NumBins           int     `json:"num_bins,omitempty"`
	ScaleDType        string  `json:"scale_dtype"`
}

func newSpecDoc(s *spec.QuantizationSpec) *specDoc {
	return &specDoc{DType: s.DType.String(), QScheme: s.QScheme.String(), Granularity: s.Granularity.Type.String(),
		Axis: s.Granularity.Axis, BlockSize: s.Granularity.BlockSize, QParamCalculator: s.Calculator.Type.String(),
		AveragingConstant: s.Calculator.AveragingConstant, Percentile: s.Calculator.Percentile, NumBins: s.Calculator.NumBins,
		ScaleDType: s.ScaleDType.String()}
}

func runInspectConfig(opts *inspectOptions, m *onnxgraph.Model, s *passes.ModelSummary) error {
	cfg, err := loadConfig(opts.Config)
	if err != nil {
		return err
	}
	res, err := passes.Resolve(cfg.Quant, m.Graph)
	if err != nil {
		return configUsageError(err)
	}
	var pres *config.PaletteResolution
	if cfg.Palette != nil {
		if pres, err = config.ResolvePalettization(cfg.Palette, m.Graph); err != nil {
			return configUsageError(err)
		}
		res.Warnings = append(res.Warnings, pres.Warnings...)
	}
	for _, n := range cfg.Notices {
		fmt.Fprintf(opts.IO.ErrOut, "notice: %s\n", n.Error())
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", w.Error())
	}
	switch opts.Format {
	case "json", "yaml":
		doc := inspectConfigDoc{ModelSummary: s, Config: opts.Config, Nodes: []resolvedNode{}}
		for i, nr := range res.Nodes {
			rn := resolvedNode{NodeInfo: s.Nodes[i], Call: newCallDoc(nr.Call), ModuleRule: nr.ModuleRule, Quantization: []tensorSpecDoc{}, NotQuantized: []tensorSpecDoc{}}
			for _, t := range nr.Tensors {
				td := tensorSpecDoc{Role: t.Role.String(), Index: t.Index, Tensor: t.Value, Key: t.Key, Rule: t.Rule, Reason: t.Reason}
				if t.Spec != nil {
					td.Spec = newSpecDoc(t.Spec)
					rn.Quantization = append(rn.Quantization, td)
				} else {
					rn.NotQuantized = append(rn.NotQuantized, td)
				}
			}
			doc.Nodes = append(doc.Nodes, rn)
		}
		if pres != nil {
			doc.Palettization = paletteDocs(pres)
		}
		if opts.Format == "json" {
			return writeDocument(opts.IO.Out, "json", doc, nil)
		}
		return writeYAMLViaJSON(opts.IO.Out, doc)
	}
	if err := writeSummaryTable(opts.IO.Out, s, opts.Nodes); err != nil {
		return err
	}
	if err := writeResolutionTable(opts.IO.Out, opts.Config, res); err != nil || pres == nil {
		return err
	}
	return writePaletteTable(opts.IO.Out, opts.Config, pres)
}

// writeResolutionTable lists the op names each node answers to, then, per
// node, each quantized tensor's spec and the rule (file:line and YAML path)
// that chose it.
func writeResolutionTable(w io.Writer, file string, res *config.Resolution) error {
	fmt.Fprintf(w, "\nop names (op_name_config keys: the ONNX name, the graph-mode name, or with execution_mode: eager the eager name)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\top type\tgraph mode\teager mode")
	for _, nr := range res.Nodes {
		graph := nr.Call.GraphName
		if graph == "" {
			graph = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", nr.Node.Name, nr.Call.Type, graph, nr.Call.EagerName)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nquantization (config %s)\n", file)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\ttensor\tvalue\tspec\trule")
	skipped := 0
	for _, nr := range res.Nodes {
		name := nr.Node.Name
		q := nr.Quantized()
		skipped += len(nr.Tensors) - len(q)
		if len(q) == 0 {
			fmt.Fprintf(tw, "  %s\t-\t\tnot quantized\t%s\n", name, nr.OpRule)
			continue
		}
		for _, t := range q {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, t.Label(), t.Value, t.Spec, t.Rule)
			name = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if skipped > 0 {
		fmt.Fprintf(w, "\n%d tensor slots are not quantized; --format json lists each with its reason and rule\n", skipped)
	}
	return nil
}

// writeYAMLViaJSON writes v as YAML with the JSON field names and order:
// JSON is YAML, so the JSON document is parsed into a yaml.Node (which
// keeps key order) and re-encoded in block style.
func writeYAMLViaJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	var block func(n *yaml.Node)
	block = func(n *yaml.Node) {
		n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
		for _, c := range n.Content {
			block(c)
		}
	}
	block(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}
