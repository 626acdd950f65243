package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

type opsOptions struct {
	IO     *IO
	Format string
}

// NewCmdOps builds `coreaiq ops`.
func NewCmdOps(streams *IO, runF func(*opsOptions) error) *cobra.Command {
	opts := &opsOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "List the op types that get quantized, with their quantizable tensors and default axes",
		Long: "List every ONNX op type prepare quantizes (coreai-opt's supported_modules()): the torch op\n" +
			"types op_type_config may name it by, the inputs it quantizes with the keys op_input_spec and\n" +
			"op_state_spec accept for them, and the default weight axes. Op-level specs on other ops are\n" +
			"not applied (inspect --config says so); module_*_spec reach any op.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(opts.Format); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runOps(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "table", "output format: table, json or yaml")
	return cmd
}

// opDoc is one op of `coreaiq ops`.
type opDoc struct {
	OpType     string   `json:"op_type"`
	TorchTypes []string `json:"torch_op_types"`
	Kind       string   `json:"kind"`
	// Inputs are the quantized activation inputs, each as its keys.
	Inputs     []string `json:"inputs"`
	State      string   `json:"state,omitempty"`
	WeightAxes string   `json:"weight_axes,omitempty"`
	Outputs    string   `json:"outputs"`
	FixedRange string   `json:"fixed_range,omitempty"`
}

func opDocs() []opDoc {
	var docs []opDoc
	for _, s := range passes.SupportedOps() {
		positions := s.Inputs
		if positions == nil {
			positions = []int{0, 1}
		}
		maxIn := max(positions[len(positions)-1]+1, s.Bias+1)
		names := config.NamesOf(s.OpType, maxIn)
		d := opDoc{OpType: s.OpType, TorchTypes: names.TorchTypes, Kind: s.Kind, WeightAxes: names.WeightAxes,
			Outputs: "output 0", FixedRange: s.FixedRange}
		if d.TorchTypes == nil {
			d.TorchTypes = []string{}
		}
		for _, i := range positions {
			if s.Kind == "compute" && i == 1 && s.OpType != "MatMul" && s.OpType != "Gemm" {
				continue
			}
			keys := append([]string{fmt.Sprint(i)}, names.Inputs[i]...)
			label := strings.Join(keys, "|")
			if s.Inputs == nil && i == 1 && s.OpType == "Concat" {
				label += " …"
			}
			d.Inputs = append(d.Inputs, label)
		}
		switch {
		case s.Kind == "compute" && s.Bias >= 0:
			d.State = "weight, bias (int32 from the input and weight scales)"
		case s.Kind == "compute":
			d.State = "weight (a constant input 1)"
		case s.OpType == "Gather":
			d.State = "weight (a constant table: embedding)"
		default:
			d.State = "constant inputs, by op_state_spec"
		}
		if s.AllOutputs {
			d.Outputs = "every output"
		}
		docs = append(docs, d)
	}
	return docs
}

func runOps(opts *opsOptions) error {
	docs := opDocs()
	return writeDocument(opts.IO.Out, opts.Format, docs, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "op type\ttorch op types\tkind\tquantized inputs (index|keys)\tstate\tdefault weight axes\toutputs")
		for _, d := range docs {
			axes := d.WeightAxes
			if axes == "" {
				axes = "-"
			}
			out := d.Outputs
			if d.FixedRange != "" {
				out += " (range " + d.FixedRange + ")"
			}
			torch := strings.Join(d.TorchTypes, " ")
			if torch == "" {
				torch = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.OpType, torch, d.Kind, strings.Join(d.Inputs, ", "), d.State, axes, out)
		}
		return tw.Flush()
	})
}
