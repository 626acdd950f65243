package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

type inspectOptions struct {
	IO     *IO
	Model  string
	Format string
	Nodes  bool
	// Config, when set, adds each node's resolved quantization specs.
	Config string
}

// NewCmdInspect builds `coreaiq inspect MODEL`.
func NewCmdInspect(streams *IO, runF func(*inspectOptions) error) *cobra.Command {
	opts := &inspectOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "inspect MODEL",
		Short: "Describe a model: inputs, outputs, ops, modules and parameters",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model = args[0]
			if err := checkFormat(opts.Format); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runInspect(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVar(&opts.Nodes, "nodes", false, "list every node with its module (table format)")
	cmd.Flags().StringVar(&opts.Config, "config", "", "resolve this config against the model: each quantized tensor's spec and the rule that chose it")
	return cmd
}

func checkFormat(f string) error {
	switch f {
	case "table", "json", "yaml":
		return nil
	}
	return Usagef("--format %q: want table, json or yaml", f)
}

// loadModel loads a model, reporting a bad file as a usage error (exit 2).
// The file's bytes are garbage once decoded; a large model is collected
// right away, so that the garbage collector's next target is twice the
// decoded model rather than twice the model and its file (a 643 MB model
// otherwise peaked at 2.7 GB).
func loadModel(path string) (*onnxgraph.Model, error) {
	m, err := onnxgraph.Load(path)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() >= largeModelBytes {
		debug.FreeOSMemory()
	}
	return m, nil
}

// largeModelBytes is the model file size from which loadModel collects
// the file's bytes at once.
const largeModelBytes = 64 << 20

func runInspect(opts *inspectOptions) error {
	m, err := loadModel(opts.Model)
	if err != nil {
		return err
	}
	s := passes.Summarize(m)
	s.Model = opts.Model
	if opts.Config != "" {
		return runInspectConfig(opts, m, s)
	}
	return writeDocument(opts.IO.Out, opts.Format, s, func(w io.Writer) error {
		return writeSummaryTable(w, s, opts.Nodes)
	})
}

// writeDocument writes v as JSON or YAML, or calls table for the table format.
func writeDocument(w io.Writer, format string, v any, table func(io.Writer) error) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	return table(w)
}

func writeSummaryTable(w io.Writer, s *passes.ModelSummary, nodes bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	producer := strings.TrimSpace(s.Producer + " " + s.ProducerVersion)
	if producer == "" {
		producer = "(unknown)"
	}
	fmt.Fprintf(tw, "model\t%s\n", s.Model)
	fmt.Fprintf(tw, "producer\t%s\n", producer)
	fmt.Fprintf(tw, "IR version\t%d\n", s.IRVersion)
	var opsets []string
	for _, d := range sortedMapKeys(s.Opsets) {
		opsets = append(opsets, fmt.Sprintf("%s %d", d, s.Opsets[d]))
	}
	fmt.Fprintf(tw, "opsets\t%s\n", strings.Join(opsets, ", "))
	fmt.Fprintln(tw, "\ninputs")
	for _, t := range s.Inputs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, t.DType, formatShape(t.Shape))
	}
	fmt.Fprintln(tw, "\noutputs")
	for _, t := range s.Outputs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.Name, t.DType, formatShape(t.Shape))
	}
	fmt.Fprintf(tw, "\nop types (%d nodes)\n", len(s.Nodes))
	ops := sortedMapKeys(s.OpTypes)
	sort.SliceStable(ops, func(i, j int) bool { return s.OpTypes[ops[i]] > s.OpTypes[ops[j]] })
	for _, op := range ops {
		fmt.Fprintf(tw, "  %s\t%d\n", op, s.OpTypes[op])
	}
	fmt.Fprintln(tw, "\nparameters")
	for _, d := range s.Initializers.ByDType {
		fmt.Fprintf(tw, "  %s\t%d tensors\t%s params\t%s\n", d.DType, d.Tensors, groupDigits(d.Parameters), formatBytes(d.Bytes))
	}
	fmt.Fprintf(tw, "  total\t%d tensors\t\t%s\n", s.Initializers.Count, formatBytes(s.Initializers.Bytes))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Modules) > 1 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "modules\ttype\tnodes")
		for _, m := range s.Modules {
			name := m.Name
			if name == "" {
				name = "(root)"
			} else if i := strings.LastIndex(name, "."); i >= 0 && m.Depth > 1 {
				name = name[i+1:]
			}
			fmt.Fprintf(tw, "  %s%s\t%s\t%d\n", strings.Repeat("  ", m.Depth), name, m.Type, m.Nodes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if nodes {
		fmt.Fprintln(w, "\nnodes")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tname\top type\tmodule")
		for i, n := range s.Nodes {
			op := n.OpType
			if n.Domain != "" {
				op = n.Domain + "." + op
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", i, n.Name, op, n.Module)
		}
		return tw.Flush()
	}
	return nil
}

func formatShape(shape []any) string {
	if shape == nil {
		return "(unknown rank)"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
