package passes

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// WeightProgress is reported by prepare after each weight it plans.
type WeightProgress struct {
	Tensor, Tensors int   // weights planned so far, of how many
	Bytes, Total    int64 // their bytes in the model, of how many
	Name            string
	Elapsed         time.Duration
}

// weightWork counts the weights planStates will plan and their bytes.
func (p *preparer) weightWork() (n int, bytes int64) {
	seen := map[string]bool{}
	p.forEachWeight(func(_ *onnxgraph.Node, v *onnxgraph.Value) {
		if seen[v.Name] || v.Const == nil {
			return
		}
		seen[v.Name] = true
		n++
		bytes += constBytes(v)
	})
	return n, bytes
}

// constBytes is the size of a constant's data in the model.
func constBytes(v *onnxgraph.Value) int64 {
	e := 1
	for _, d := range v.Const.GetDims() {
		e *= int(d)
	}
	return int64(tensor.DType(v.Const.GetDataType()).RawSize(e))
}

// WeightProgressReporter shows the weight pass: on a terminal a bar
// redrawn in place (tensor n of N, bytes, ETA), elsewhere one log record
// every 10% of the bytes or every 10 s.
type WeightProgressReporter struct {
	w         io.Writer
	terminal  bool
	log       *slog.Logger
	lastDraw  time.Duration
	drawn     bool
	nextTenth int64
	lastLog   time.Duration
}

// NewWeightProgressReporter writes the bar to w on a terminal, log records
// to logger otherwise.
func NewWeightProgressReporter(w io.Writer, terminal bool, logger *slog.Logger) *WeightProgressReporter {
	return &WeightProgressReporter{w: w, terminal: terminal, log: logger, nextTenth: 1}
}

// Report is a PrepareOptions.Progress callback.
func (r *WeightProgressReporter) Report(e WeightProgress) {
	if e.Total <= 0 {
		return
	}
	eta := time.Duration(0)
	if e.Bytes > 0 {
		eta = time.Duration(float64(e.Elapsed) * float64(e.Total-e.Bytes) / float64(e.Bytes))
	}
	done := e.Tensor == e.Tensors
	if r.terminal {
		if r.drawn && !done && e.Elapsed-r.lastDraw < 100*time.Millisecond {
			return
		}
		r.lastDraw, r.drawn = e.Elapsed, true
		const width = 30
		filled := int(e.Bytes * width / e.Total)
		fmt.Fprintf(r.w, "\rquantizing weights %s %3d%% tensor %d/%d  %s/%s  ETA %s ",
			strings.Repeat("█", filled)+strings.Repeat("░", width-filled), e.Bytes*100/e.Total,
			e.Tensor, e.Tensors, mib(e.Bytes), mib(e.Total), eta.Round(time.Second))
		if done {
			fmt.Fprintln(r.w)
		}
		return
	}
	// Records every tenth of the bytes or 10 s once the pass has run for a
	// second (a small model gets none), and the last one if any came before.
	tenth := e.Bytes * 10 / e.Total
	switch {
	case done && r.lastLog > 0:
	case e.Elapsed < time.Second:
		return
	case tenth < r.nextTenth && e.Elapsed-r.lastLog < 10*time.Second:
		return
	}
	r.nextTenth, r.lastLog = tenth+1, e.Elapsed
	r.log.Info("quantizing weights", "tensor", e.Tensor, "tensors", e.Tensors, "name", e.Name,
		"bytes", e.Bytes, "total_bytes", e.Total, "eta", eta.Round(time.Second).String())
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// BlockProgress is reported by an algorithm that goes block by block
// (GPTQ, AWQ) after each block.
type BlockProgress struct {
	Algorithm     string
	Block, Blocks int // blocks done, of how many
	// Layers are the nodes of the block the algorithm rewrote.
	Layers  []string
	Elapsed time.Duration // since the first block began
}

// ETA extrapolates the time left from the mean time per block so far.
func (e BlockProgress) ETA() time.Duration {
	if e.Block <= 0 {
		return 0
	}
	return time.Duration(float64(e.Elapsed) * float64(e.Blocks-e.Block) / float64(e.Block))
}

// blockProgress returns the callback an algorithm calls after each of its
// blocks: it times the blocks from now and reports to d.Progress, if set.
func (d *AlgorithmData) blockProgress(algorithm string, blocks int) func(b *graphBlock) {
	began := time.Now()
	return func(b *graphBlock) {
		if d.Progress == nil {
			return
		}
		names := make([]string, len(b.layers))
		for i, n := range b.layers {
			names[i] = n.Name
		}
		d.Progress(BlockProgress{Algorithm: algorithm, Block: b.index + 1, Blocks: blocks, Layers: names, Elapsed: time.Since(began)})
	}
}

// BlockProgressReporter shows a block-by-block algorithm's progress: on a
// terminal a line redrawn in place (block n of N, layers, elapsed, ETA),
// elsewhere one log record per block, so that a long run on a large
// decoder is never silent.
type BlockProgressReporter struct {
	w        io.Writer
	terminal bool
	log      *slog.Logger
}

// NewBlockProgressReporter writes the line to w on a terminal, log records
// to logger otherwise.
func NewBlockProgressReporter(w io.Writer, terminal bool, logger *slog.Logger) *BlockProgressReporter {
	return &BlockProgressReporter{w: w, terminal: terminal, log: logger}
}

// Report is an AlgorithmData.Progress callback.
func (r *BlockProgressReporter) Report(e BlockProgress) {
	if e.Blocks <= 0 {
		return
	}
	eta := e.ETA().Round(time.Second)
	elapsed := e.Elapsed.Round(time.Second)
	if r.terminal {
		const width = 30
		filled := e.Block * width / e.Blocks
		fmt.Fprintf(r.w, "\r%s %s block %d/%d  %d layers  %s elapsed  ETA %s ",
			e.Algorithm, strings.Repeat("█", filled)+strings.Repeat("░", width-filled), e.Block, e.Blocks, len(e.Layers), elapsed, eta)
		if e.Block == e.Blocks {
			fmt.Fprintln(r.w)
		}
		return
	}
	r.log.Info("block done", "algorithm", e.Algorithm, "block", e.Block, "blocks", e.Blocks,
		"layers", strings.Join(e.Layers, ","), "elapsed", elapsed.String(), "eta", eta.String())
}
