package calibrate

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// ProgressReporter shows a calibration run's progress: on a terminal a bar
// redrawn in place with \r (samples/s and ETA), elsewhere (CI logs) one log
// record every 10% of the samples or every 10 s, whichever comes first.
// Times come from Progress.Elapsed, so the output is a function of the
// progress events alone.
type ProgressReporter struct {
	w        io.Writer
	terminal bool
	log      *slog.Logger

	lastDraw  time.Duration
	drawn     bool
	nextTenth int
	lastLog   time.Duration
}

// progressBarWidth is the number of cells of the bar.
const progressBarWidth = 30

// NewProgressReporter writes the bar to w when terminal is true, log
// records to logger otherwise.
func NewProgressReporter(w io.Writer, terminal bool, logger *slog.Logger) *ProgressReporter {
	return &ProgressReporter{w: w, terminal: terminal, log: logger, nextTenth: 1}
}

// Report is an Options.Progress callback.
func (p *ProgressReporter) Report(e Progress) {
	if e.Total <= 0 {
		return
	}
	rate, eta := 0.0, time.Duration(0)
	if s := e.Elapsed.Seconds(); s > 0 {
		rate = float64(e.Samples) / s
		if rate > 0 {
			eta = time.Duration(float64(e.Total-e.Samples) / rate * float64(time.Second))
		}
	}
	if p.terminal {
		// Redraw at most ten times a second, and always at the end.
		if p.drawn && e.Samples < e.Total && e.Elapsed-p.lastDraw < 100*time.Millisecond {
			return
		}
		p.lastDraw, p.drawn = e.Elapsed, true
		fmt.Fprintf(p.w, "\r%s", progressLine(e, rate, eta))
		return
	}
	tenth := e.Samples * 10 / e.Total
	if tenth < p.nextTenth && e.Elapsed-p.lastLog < 10*time.Second {
		return
	}
	p.nextTenth = tenth + 1
	p.lastLog = e.Elapsed
	p.log.Info("calibrating", "samples", e.Samples, "total", e.Total, "batch", e.Batch, "batches", e.Batches,
		"samples_per_s", round1(rate), "eta", eta.Round(time.Second).String())
}

// Done ends the bar's line on a terminal.
func (p *ProgressReporter) Done() {
	if p.terminal && p.drawn {
		fmt.Fprintln(p.w)
	}
}

func progressLine(e Progress, rate float64, eta time.Duration) string {
	filled := e.Samples * progressBarWidth / e.Total
	bar := strings.Repeat("█", filled) + strings.Repeat("░", progressBarWidth-filled)
	return fmt.Sprintf("calibrating %s %3d%% %d/%d samples  %.1f samples/s  ETA %s ",
		bar, e.Samples*100/e.Total, e.Samples, e.Total, rate, clock(eta))
}

// clock formats a duration as m:ss (h:mm:ss from an hour).
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
