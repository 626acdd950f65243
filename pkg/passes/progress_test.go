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
