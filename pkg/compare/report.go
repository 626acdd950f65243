package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// WriteJSON writes the report as one indented JSON document. SQNR figures
// are numbers, or the strings "inf" and "-inf" (see DB).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as aligned text tables.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Reference != "" {
		fmt.Fprintf(tw, "reference\t%s\n", r.Reference)
	}
	if r.Candidate != "" {
		fmt.Fprintf(tw, "candidate\t%s\n", r.Candidate)
	}
	fmt.Fprintf(tw, "engine\t%s\n", r.Engine)
	fmt.Fprintf(tw, "samples\t%d in %d batches\n\n", r.Samples, r.Batches)
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := r.writeOutputs(w); err != nil {
		return err
	}
	if r.Layers != nil || len(r.Unpaired) > 0 {
		fmt.Fprintln(w)
		if err := r.WriteLayers(w, 0); err != nil {
			return err
		}
	}
	if len(r.Palettized) > 0 {
		fmt.Fprintln(w)
		if err := r.writePalettized(w); err != nil {
			return err
		}
	}
	if r.Gates != nil {
		fmt.Fprintln(w)
		if len(r.Violations) == 0 {
			fmt.Fprintln(w, "quality gates passed")
		}
		for _, v := range r.Violations {
			fmt.Fprintf(w, "FAILED  %s\n", v.Message)
		}
	}
	return nil
}

// WriteOutputs writes the per-output table alone (the quantize report uses it).
func (r *Report) WriteOutputs(w io.Writer) error { return r.writeOutputs(w) }

func (r *Report) writeOutputs(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	logits, labels := false, false
	for _, o := range r.Outputs {
		logits = logits || o.LogitsLike()
		labels = labels || o.ReferenceAccuracy != nil
	}
	head := []string{"output", "shape", "SQNR dB", "cosine", "max abs err", "mean abs err"}
	if logits {
		head = append(head, "top-1 agree", "top-5 agree")
	}
	if labels {
		head = append(head, "ref acc", "cand acc")
	}
	// Figures align right; names and shapes are padded to align left.
	// An output's slices follow it, indented, their range in the shape column.
	names, shapes := []string{head[0]}, []string{head[1]}
	for _, o := range r.Outputs {
		name := o.Name
		if o.CandidateName != "" {
			name += " (" + o.CandidateName + ")"
		}
		names, shapes = append(names, name), append(shapes, fmt.Sprint(o.Shape))
		for _, sl := range o.Slices {
			names, shapes = append(names, "  "+sl.Name), append(shapes, fmt.Sprintf("axis %d: %d-%d", sl.Axis, sl.From, sl.To))
		}
	}
	padLeft(names)
	padLeft(shapes)
	head[0], head[1] = names[0], shapes[0]
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	rowAt := 1
	line := func(cells ...string) {
		fmt.Fprintln(tw, strings.Join(append([]string{names[rowAt], shapes[rowAt]}, cells...), "\t")+"\t")
		rowAt++
	}
	for _, o := range r.Outputs {
		row := []string{o.SQNR.String(), fmtCos(o.Cosine), fmtG(o.MaxAbsError), fmtG(o.MeanAbsError)}
		if logits {
			row = append(row, fmtPct(o.Top1Agreement), fmtPct(o.Top5Agreement))
		}
		if labels {
			row = append(row, fmtPct(o.ReferenceAccuracy), fmtPct(o.CandidateAccuracy))
		}
		line(row...)
		for _, sl := range o.Slices {
			line(sl.SQNR.String(), fmtCos(sl.Cosine), fmtG(sl.MaxAbsError), fmtG(sl.MeanAbsError))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, o := range r.Outputs {
		if o.NonFinite > 0 {
			fmt.Fprintf(w, "output %q: %d element pairs are NaN or infinite on one side only\n", o.Name, o.NonFinite)
		}
	}
	return nil
}

// WriteLayers writes the per-layer table, worst first; limit > 0 keeps only
// the first limit rows.
func (r *Report) WriteLayers(w io.Writer, limit int) error {
	fmt.Fprintf(w, "per-layer SQNR, worst first (%d quantized activations", len(r.Layers))
	if r.WeightDequantizers > 0 {
		fmt.Fprintf(w, "; %d weight dequantizers not listed", r.WeightDequantizers)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintln(w, "  SQNR: candidate vs float reference, accumulated up to the tensor; local: this quantizer alone")
	rescaled, floored := 0, 0
	for _, l := range r.Layers {
		if l.IsRescaled {
			rescaled++
		}
		if l.Floored {
			floored++
		}
	}
	if rescaled > 0 {
		fmt.Fprintf(w, "  %d tensor(s) rescaled per channel by an algorithm (cross-layer equalization, SmoothQuant, AWQ): set against the reference with the rescale undone\n", rescaled)
	}
	if floored > 0 {
		fmt.Fprintf(w, "  %d SiLU input(s) quantized from where the SiLU's quantized output leaves 0: values below the grid count as its lowest value on both sides (they do not reach the SiLU's output)\n", floored)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SQNR dB\tlocal dB\ttensor\tnode\top\tmodule\tdtype\tclip range\trule")
	for i, l := range r.Layers {
		if limit > 0 && i == limit {
			fmt.Fprintf(tw, "  … %d more\n", len(r.Layers)-limit)
			break
		}
		module := l.Module
		if module == "" {
			module = "(root)"
		}
		node := l.Node
		if node == "" {
			node = "-"
		}
		rule := l.Rule
		if rule == "" {
			rule = "-"
		}
		sqnr, local := l.SQNR.String(), l.LocalSQNR.String()
		if l.NonFinite > 0 {
			sqnr += "*"
		}
		if l.LocalNonFinite > 0 {
			local += "*"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sqnr, local, l.Tensor, node, l.OpType, module, l.DType, fmtClip(l.ClipMin, l.ClipMax), rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, l := range r.Layers {
		if limit > 0 && i == limit {
			break
		}
		if n := max(l.NonFinite, l.LocalNonFinite); n > 0 {
			fmt.Fprintf(w, "  * %s: %d element pairs are NaN or infinite on one side only (e.g. a -inf mask saturated by QuantizeLinear); the SQNR covers the finite ones\n", l.Tensor, n)
		}
	}
	if len(r.Unpaired) > 0 {
		fmt.Fprintf(w, "not compared (%d):\n", len(r.Unpaired))
		for _, u := range r.Unpaired {
			fmt.Fprintf(w, "  %s: %s\n", u.Value, u.Reason)
		}
	}
	return nil
}

// padLeft pads every string to the longest one's width, so that a
// right-aligning tabwriter column reads left-aligned.
func padLeft(col []string) {
	w := 0
	for _, c := range col {
		w = max(w, utf8.RuneCountInString(c))
	}
	for i, c := range col {
		col[i] = c + strings.Repeat(" ", w-utf8.RuneCountInString(c))
	}
}

func fmtClip(lo, hi *float64) string {
	if lo == nil || hi == nil {
		return "-"
	}
	return "[" + fmtG(*lo) + ", " + fmtG(*hi) + "]"
}

func fmtG(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

func fmtCos(f float64) string { return strconv.FormatFloat(f, 'f', 6, 64) }

func fmtPct(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', 2, 64) + "%"
}
