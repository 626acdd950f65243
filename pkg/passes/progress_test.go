package passes

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWeightProgressReporter: a terminal gets a bar ending in a newline at
// the last tensor; a log gets nothing for a pass under a second, and for a
// longer one a record per tenth of the bytes plus the last.
func TestWeightProgressReporter(t *testing.T) {
	events := func(step time.Duration) []WeightProgress {
		var out []WeightProgress
		for i := 1; i <= 20; i++ {
			out = append(out, WeightProgress{Tensor: i, Tensors: 20, Bytes: int64(i) * 100, Total: 2000,
				Name: "w", Elapsed: time.Duration(i) * step})
		}
		return out
	}
	cases := []struct {
		name     string
		terminal bool
		step     time.Duration
		records  int
		want     string
	}{
		{"terminal", true, time.Second, 0, "tensor 20/20"},
		{"short log", false, 10 * time.Millisecond, 0, ""},
		{"long log", false, time.Second, 10, "tensor=20"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var term, logs bytes.Buffer
			r := NewWeightProgressReporter(&term, c.terminal, slog.New(slog.NewTextHandler(&logs, nil)))
			for _, e := range events(c.step) {
				r.Report(e)
			}
			out := term.String() + logs.String()
			if n := strings.Count(logs.String(), "quantizing weights"); n != c.records {
				t.Errorf("%d log records, want %d:\n%s", n, c.records, logs.String())
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("output lacks %q:\n%s", c.want, out)
			}
			if c.terminal && !strings.HasSuffix(out, "\n") {
				t.Errorf("the bar does not end its line: %q", out)
			}
		})
	}
}

// TestBlockProgressReporter: a terminal gets a line per block redrawn in
// place, ending in a newline at the last block; a log gets one record per
// block with the algorithm, the block, its layers and the ETA.
func TestBlockProgressReporter(t *testing.T) {
	events := []BlockProgress{
		{Algorithm: "gptq", Block: 1, Blocks: 4, Layers: []string{"q", "k"}, Elapsed: 10 * time.Second},
		{Algorithm: "gptq", Block: 2, Blocks: 4, Layers: []string{"up"}, Elapsed: 20 * time.Second},
		{Algorithm: "gptq", Block: 3, Blocks: 4, Layers: []string{"down"}, Elapsed: 30 * time.Second},
		{Algorithm: "gptq", Block: 4, Blocks: 4, Layers: []string{"head"}, Elapsed: 40 * time.Second},
	}
	cases := []struct {
		name     string
		terminal bool
		records  int
		want     []string
	}{
		{"terminal", true, 0, []string{"\rgptq ", "block 1/4  2 layers  10s elapsed  ETA 30s", "block 4/4  1 layers  40s elapsed  ETA 0s"}},
		{"log", false, 4, []string{"algorithm=gptq block=1 blocks=4 layers=q,k elapsed=10s eta=30s", "block=3 blocks=4 layers=down elapsed=30s eta=10s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var term, logs bytes.Buffer
			r := NewBlockProgressReporter(&term, c.terminal, slog.New(slog.NewTextHandler(&logs, nil)))
			for _, e := range events {
				r.Report(e)
			}
			out := term.String() + logs.String()
			if n := strings.Count(logs.String(), "block done"); n != c.records {
				t.Errorf("%d log records, want %d:\n%s", n, c.records, logs.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if c.terminal && (!strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1) {
				t.Errorf("the line is not redrawn in place and ended once: %q", out)
			}
		})
	}
}
