package runtime

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// Profile collects where a built-in engine session's runs spend their
// time: per node, how often it ran, for how long and with which kernel,
// and one trace event per step for a timeline. Set it in Options.Profile;
// every run of the session adds to it, concurrent runs included. Only
// the steps of the main graph are counted (an If's branch is timed as
// the If node), so the nodes' shares add up to the engine's time; the
// taps that observe values during a run are counted as one row of their
// own, "(taps)".
type Profile struct {
	mu    sync.Mutex
	start time.Time
	runs  int
	// wall is the summed duration of the runs.
	wall  time.Duration
	nodes map[string]*NodeProfile
	// events are the trace events, at most MaxEvents of them.
	events  []traceEvent
	dropped int
	// lanes marks the timeline rows that a run in progress occupies.
	lanes []bool
	// MaxEvents bounds the trace events kept (0: DefaultMaxTraceEvents);
	// later steps are still counted in the table.
	MaxEvents int
}

// DefaultMaxTraceEvents is the number of trace events a Profile keeps
// unless told otherwise: enough for hundreds of runs of a model with a
// thousand nodes, at about 100 bytes each.
const DefaultMaxTraceEvents = 1 << 20

// tapsNode names the pseudo-node that the time spent in taps goes to.
const tapsNode = "(taps)"

// NodeProfile is one node's share of a profile.
type NodeProfile struct {
	Node   string
	OpType string
	// Kernel is the way the engine computed the node the last time it
	// ran ("" when the op has a single way).
	Kernel string
	Count  int
	Total  time.Duration
	// first orders the nodes as the program runs them.
	first int
}

// OpProfile is one op type's share of a profile.
type OpProfile struct {
	OpType string
	Nodes  int
	Count  int
	Total  time.Duration
}

type traceEvent struct {
	name, op, kernel string
	lane             int
	start, dur       time.Duration
}

// NewProfile returns an empty profile.
func NewProfile() *Profile {
	return &Profile{start: time.Now(), nodes: map[string]*NodeProfile{}}
}

// Reset forgets what the profile holds, such as a warm-up run's
// first-touch costs; runs in progress keep their rows.
func (p *Profile) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start, p.runs, p.wall, p.dropped = time.Now(), 0, 0, 0
	p.nodes, p.events = map[string]*NodeProfile{}, nil
}

// beginRun takes a timeline row for a run.
func (p *Profile) beginRun() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, busy := range p.lanes {
		if !busy {
			p.lanes[i] = true
			return i
		}
	}
	p.lanes = append(p.lanes, true)
	return len(p.lanes) - 1
}

// endRun gives the row back and counts the run.
func (p *Profile) endRun(lane int, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lanes[lane] = false
	p.runs++
	p.wall += d
}

// record adds one step: node name and op type, the kernel it chose, when
// it started and how long it took.
func (p *Profile) record(node, op, kernel string, lane int, start time.Time, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	np := p.nodes[node]
	if np == nil {
		np = &NodeProfile{Node: node, OpType: op, first: len(p.nodes)}
		p.nodes[node] = np
	}
	np.Count++
	np.Total += d
	if kernel != "" {
		np.Kernel = kernel
	}
	limit := cmp.Or(p.MaxEvents, DefaultMaxTraceEvents)
	if len(p.events) >= limit {
		p.dropped++
		return
	}
	p.events = append(p.events, traceEvent{name: node, op: op, kernel: kernel, lane: lane, start: start.Sub(p.start), dur: d})
}

// Runs is the number of runs profiled.
func (p *Profile) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// Nodes returns every node's profile, slowest first (ties in program
// order).
func (p *Profile) Nodes() []NodeProfile {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]NodeProfile, 0, len(p.nodes))
	for _, np := range p.nodes {
		out = append(out, *np)
	}
	slices.SortFunc(out, func(a, b NodeProfile) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.first, b.first))
	})
	return out
}

// OpTypes returns the time per op type, slowest first (ties by name).
func (p *Profile) OpTypes() []OpProfile {
	byOp := map[string]*OpProfile{}
	for _, np := range p.Nodes() {
		o := byOp[np.OpType]
		if o == nil {
			o = &OpProfile{OpType: np.OpType}
			byOp[np.OpType] = o
		}
		o.Nodes++
		o.Count += np.Count
		o.Total += np.Total
	}
	out := make([]OpProfile, 0, len(byOp))
	for _, o := range byOp {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b OpProfile) int {
		return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.OpType, b.OpType))
	})
	return out
}

// WriteTable prints the profile for people: the runs, the time per op
// type and the top slowest nodes with their count, total, share of the
// nodes' time and the kernel chosen.
func (p *Profile) WriteTable(w io.Writer, top int) error {
	nodes := p.Nodes()
	var total time.Duration
	for _, n := range nodes {
		total += n.Total
	}
	p.mu.Lock()
	runs, wall := p.runs, p.wall
	p.mu.Unlock()
	share := func(d time.Duration) string {
		if total == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(total))
	}
	fmt.Fprintf(w, "profile: %d runs, %.3f ms in runs, %.3f ms in %d nodes\n", runs, ms(wall), ms(total), len(nodes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "op type\tnodes\tcount\ttotal ms\tshare")
	for _, o := range p.OpTypes() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%s\n", o.OpType, o.Nodes, o.Count, ms(o.Total), share(o.Total))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\top type\tcount\ttotal ms\tshare\tkernel")
	for _, n := range nodes[:min(top, len(nodes))] {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%s\t%s\n", n.Node, n.OpType, n.Count, ms(n.Total), share(n.Total), n.Kernel)
	}
	return tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// WriteTrace writes the steps as Chrome trace JSON (chrome://tracing,
// Perfetto): one complete event per step, a row per concurrent run.
func (p *Profile) WriteTrace(w io.Writer) error {
	type event struct {
		Name string            `json:"name"`
		Cat  string            `json:"cat"`
		Ph   string            `json:"ph"`
		TS   float64           `json:"ts"`
		Dur  float64           `json:"dur"`
		PID  int               `json:"pid"`
		TID  int               `json:"tid"`
		Args map[string]string `json:"args,omitempty"`
	}
	p.mu.Lock()
	evs := make([]event, len(p.events))
	for i, e := range p.events {
		evs[i] = event{Name: e.name, Cat: e.op, Ph: "X", TS: us(e.start), Dur: us(e.dur), PID: 1, TID: e.lane + 1}
		if e.kernel != "" {
			evs[i].Args = map[string]string{"kernel": e.kernel}
		}
	}
	dropped := p.dropped
	p.mu.Unlock()
	doc := struct {
		TraceEvents     []event           `json:"traceEvents"`
		DisplayTimeUnit string            `json:"displayTimeUnit"`
		OtherData       map[string]string `json:"otherData,omitempty"`
	}{TraceEvents: evs, DisplayTimeUnit: "ms"}
	if dropped > 0 {
		doc.OtherData = map[string]string{"dropped_events": fmt.Sprint(dropped)}
	}
	enc := json.NewEncoder(w)
	return enc.Encode(doc)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
