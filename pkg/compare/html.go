package compare

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

//go:embed report.html.tmpl
var reportTemplate string

var htmlTemplate = template.Must(template.New("report").Parse(reportTemplate))

// HTMLHistograms is how many of the worst layers get a histogram in the
// HTML report.
const HTMLHistograms = 12

// htmlPage is what the template renders: every figure preformatted, every
// coordinate precomputed, so the page needs no script to draw.
type htmlPage struct {
	R          *Report
	Outputs    []htmlOutput
	Chart      *htmlChart
	Histograms []htmlHist
	Layers     []htmlLayer
	GateLines  []string
	GatesOK    bool
	HasGates   bool
	MinSQNR    string
}

type htmlOutput struct {
	Name, Shape, SQNR, Cosine, MaxAbs, MeanAbs, Top1, Top5, RefAcc, CandAcc string
	Class                                                                   string
}

type htmlChart struct {
	Width, Height int
	Bars          []htmlBar
	Ticks         []htmlTick
	LabelX        int
	AxisX, AxisY  int
}

type htmlBar struct {
	Y, Width, LabelY     string
	X, TextX             string
	Label, Value, Colour string
	Title                string
}

type htmlTick struct {
	X, Label string
}

type htmlHist struct {
	Tensor, Title, Subtitle string
	Bars                    []htmlRect
	ClipLo, ClipHi          string // x coordinates, "" when unknown
	ShadeLeft, ShadeRight   string // widths of the out-of-range shading
	ShadeRightX             string
	AxisLo, AxisHi, AxisMid string
	Clipped                 string
}

type htmlRect struct{ X, Y, W, H string }

type htmlLayer struct {
	SQNR, Local, Tensor, Node, OpType, Module, DType, Clip, Rule, Observed string
	SortSQNR, SortLocal                                                    string
	Class                                                                  string
}

// f formats a coordinate with one decimal.
func f(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// sqnrClass colours a figure: bad below the gate (or 20 dB without one),
// fair below gate+10 dB (30 dB), good above.
func sqnrClass(d DB, gate *float64) string {
	lo := 20.0
	if gate != nil {
		lo = *gate
	}
	switch v := float64(d); {
	case math.IsNaN(v) || v < lo:
		return "bad"
	case v < lo+10:
		return "fair"
	}
	return "good"
}

func sortKey(d DB) string {
	v := float64(d)
	switch {
	case math.IsInf(v, 1):
		return "1e308"
	case math.IsInf(v, -1) || math.IsNaN(v):
		return "-1e308"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func buildPage(r *Report) *htmlPage {
	p := &htmlPage{R: r}
	var gate *float64
	if r.Gates != nil {
		p.HasGates = true
		p.GatesOK = len(r.Violations) == 0
		gate = r.Gates.MinSQNR
		for _, v := range r.Violations {
			p.GateLines = append(p.GateLines, v.Message)
		}
		if gate != nil {
			p.MinSQNR = DB(*gate).String()
		}
	}
	for _, o := range r.Outputs {
		name := o.Name
		if o.CandidateName != "" {
			name += " (" + o.CandidateName + ")"
		}
		p.Outputs = append(p.Outputs, htmlOutput{Name: name, Shape: fmt.Sprint(o.Shape), SQNR: o.SQNR.String(),
			Cosine: fmtCos(o.Cosine), MaxAbs: fmtG(o.MaxAbsError), MeanAbs: fmtG(o.MeanAbsError),
			Top1: fmtPct(o.Top1Agreement), Top5: fmtPct(o.Top5Agreement), RefAcc: fmtPct(o.ReferenceAccuracy),
			CandAcc: fmtPct(o.CandidateAccuracy), Class: sqnrClass(o.SQNR, gate)})
	}
	if len(r.Layers) > 0 {
		p.Chart = buildChart(r.Layers, gate)
	}
	for i, l := range r.Layers {
		obs := "-"
		if h := l.Histogram; h != nil && h.Count > 0 {
			obs = "[" + fmtG(h.Min) + ", " + fmtG(h.Max) + "]"
		}
		p.Layers = append(p.Layers, htmlLayer{SQNR: l.SQNR.String(), Local: l.LocalSQNR.String(), Tensor: l.Tensor,
			Node: dash(l.Node), OpType: l.OpType, Module: rootName(l.Module), DType: l.DType,
			Clip: fmtClip(l.ClipMin, l.ClipMax), Rule: dash(l.Rule), Observed: obs,
			SortSQNR: sortKey(l.SQNR), SortLocal: sortKey(l.LocalSQNR), Class: sqnrClass(l.SQNR, gate)})
		if i < HTMLHistograms && l.Histogram != nil && l.Histogram.Count > 0 {
			p.Histograms = append(p.Histograms, buildHist(l))
		}
	}
	return p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func rootName(m string) string {
	if m == "" {
		return "(root)"
	}
	return m
}

// buildChart lays out one horizontal bar per layer, worst first. Bars scale
// to the largest finite SQNR; infinite ones fill the axis.
func buildChart(ls []LayerReport, gate *float64) *htmlChart {
	const rowH, labelW, plotW = 18, 330, 560
	top := 10.0
	scaleMax := 10.0
	for _, l := range ls {
		if v := float64(l.SQNR); !math.IsInf(v, 0) && !math.IsNaN(v) {
			scaleMax = math.Max(scaleMax, v)
		}
	}
	scaleMax = math.Ceil(scaleMax/10) * 10
	c := &htmlChart{Width: labelW + plotW + 70, LabelX: labelW - 6, AxisX: labelW}
	for i, l := range ls {
		v := float64(l.SQNR)
		w := 0.0
		switch {
		case math.IsInf(v, 1):
			w = plotW
		case v > 0:
			w = v / scaleMax * plotW
		}
		y := top + float64(i*rowH)
		label := l.Tensor
		if len([]rune(label)) > 46 {
			r := []rune(label)
			label = "…" + string(r[len(r)-45:])
		}
		c.Bars = append(c.Bars, htmlBar{Y: f(y + 2), Width: f(math.Max(w, 1)), LabelY: f(y + 13), X: f(labelW), TextX: f(labelW + math.Max(w, 1) + 4),
			Label: label, Value: l.SQNR.String() + " dB", Colour: sqnrClass(l.SQNR, gate),
			Title: fmt.Sprintf("%s — %s %s, module %s, rule %s", l.Tensor, l.OpType, dash(l.Node), rootName(l.Module), dash(l.Rule))})
	}
	c.AxisY = int(top) + len(ls)*rowH + 4
	c.Height = c.AxisY + 22
	for t := 0.0; t <= scaleMax; t += scaleMax / 5 {
		c.Ticks = append(c.Ticks, htmlTick{X: f(labelW + t/scaleMax*plotW), Label: strconv.FormatFloat(t, 'f', 0, 64)})
	}
	return c
}

// buildHist draws the float activation's histogram over a range that shows
// both the observed values and the clipping range, with log-scaled counts
// (activations are peaky: a linear axis hides the tails that clipping cuts).
func buildHist(l LayerReport) htmlHist {
	const w, h, bins = 380.0, 120.0, 76
	hs := l.Histogram
	lo, hi := hs.Min, hs.Max
	if l.ClipMin != nil && l.ClipMax != nil {
		lo, hi = math.Min(lo, *l.ClipMin), math.Max(hi, *l.ClipMax)
	}
	if hi <= lo {
		lo, hi = lo-1, hi+1
	}
	pad := (hi - lo) * 0.04
	lo, hi = lo-pad, hi+pad
	counts := hs.Coarse(lo, hi, bins)
	peak := 0.0
	for _, c := range counts {
		peak = math.Max(peak, math.Log1p(float64(c)))
	}
	x := func(v float64) float64 { return (v - lo) / (hi - lo) * w }
	out := htmlHist{Tensor: l.Tensor,
		Title:    fmt.Sprintf("%s · %s dB", l.Tensor, l.SQNR),
		Subtitle: fmt.Sprintf("%s %s · module %s · %s · rule %s", l.OpType, dash(l.Node), rootName(l.Module), l.DType, dash(l.Rule)),
		AxisLo:   fmtG(lo + pad), AxisHi: fmtG(hi - pad), AxisMid: fmtG((lo + hi) / 2)}
	bw := w / bins
	for i, c := range counts {
		if c == 0 {
			continue
		}
		bh := math.Log1p(float64(c)) / peak * (h - 4)
		out.Bars = append(out.Bars, htmlRect{X: f(float64(i) * bw), Y: f(h - bh), W: f(math.Max(bw-0.6, 0.6)), H: f(bh)})
	}
	if l.ClipMin != nil && l.ClipMax != nil {
		a, b := x(*l.ClipMin), x(*l.ClipMax)
		out.ClipLo, out.ClipHi = f(a), f(b)
		out.ShadeLeft, out.ShadeRightX, out.ShadeRight = f(math.Max(a, 0)), f(b), f(math.Max(w-b, 0))
		out.Clipped = clippedShare(hs, *l.ClipMin, *l.ClipMax)
	}
	return out
}

// clippedShare is the percentage of values outside [lo, hi], counting the
// fine bins that lie wholly outside (a lower bound: a bin that straddles an
// edge counts as inside).
func clippedShare(h *Histogram, lo, hi float64) string {
	width := 2 * h.Limit / HistogramBins
	var out int64
	for i, c := range h.Bins {
		left := -h.Limit + float64(i)*width
		if left+width <= lo || left > hi {
			out += c
		}
	}
	if h.Count == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(out)/float64(h.Count), 'g', 3, 64) + "%"
}

// WriteHTML renders the report as one self-contained HTML page: inline CSS,
// SVG and script, no external resource, nothing fetched from the network.
func (r *Report) WriteHTML(w io.Writer) error {
	return htmlTemplate.Execute(w, buildPage(r))
}

// WriteHTMLFile writes the HTML report to path atomically: a temporary file
// in the same directory, renamed over path once complete.
func (r *Report) WriteHTMLFile(path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("html report %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = r.WriteHTML(tmp); err != nil {
		return fmt.Errorf("html report %s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("html report %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("html report %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("html report %s: %w", path, err)
	}
	return nil
}
