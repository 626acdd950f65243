package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/coreaiq/coreaiq/pkg/compare"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// searchOptions are quantize's accuracy target: --target-sqnr,
// --search-budget and --emit-config.
type searchOptions struct {
	// TargetSQNR is the worst output's SQNR to reach on the held-out
	// samples, nil for no search.
	TargetSQNR *float64
	// Budget is the number of candidate models the search may quantize
	// and measure after the sensitivity analysis (nil: the default).
	Budget *int
	// EmitConfig is where the config that reproduces the written model
	// goes ("" for none).
	EmitConfig string
}

// defaultSearchBudget is --search-budget's default: each evaluation is a
// whole quantize (calibration included), so the search costs about this
// many plain runs plus the sensitivity analysis.
const defaultSearchBudget = 8

func addSearchFlags(f *pflag.FlagSet, o *searchOptions) {
	optFloat64(f, &o.TargetSQNR, "target-sqnr", 0, "after quantizing, leave in float the nodes whose float copy gains most (sensitivity analysis, re-measured one promotion at a time) until every output's SQNR on the held-out samples (--eval-samples, default 4) reaches this many dB; exit 3 with the best model found when the budget runs out first")
	optInt(f, &o.Budget, "search-budget", defaultSearchBudget, "candidate models --target-sqnr may quantize and measure after its sensitivity analysis")
	f.StringVar(&o.EmitConfig, "emit-config", "", "write the config (the given one, or the preset written out, plus an op_name_config null entry per node left in float) with which quantize --config FILE writes the same model")
}

// budget is --search-budget or its default.
func (o *searchOptions) budget() int {
	if o.Budget == nil {
		return defaultSearchBudget
	}
	return *o.Budget
}

// promotion is a node the search left in float.
type promotion struct {
	Node string
	// Gain is the sensitivity analysis's gain of the node alone; SQNR is
	// the worst output's SQNR measured once the node joined the others.
	Gain, SQNR compare.DB
}

// searchStep is one candidate the search measured.
type searchStep struct {
	Node string     `json:"node"`
	Gain compare.DB `json:"sensitivity_gain_db"`
	// SQNR is the candidate's worst output; Kept is whether it became
	// the model the next candidates build on.
	SQNR compare.DB `json:"sqnr_db"`
	Kept bool       `json:"kept"`
}

// searchReport is the search in the --report JSON.
type searchReport struct {
	TargetSQNR compare.DB   `json:"target_sqnr_db"`
	Start      compare.DB   `json:"start_sqnr_db"`
	Reached    compare.DB   `json:"reached_sqnr_db"`
	Met        bool         `json:"met"`
	Promoted   []string     `json:"left_in_float"`
	Trace      []searchStep `json:"trace"`
}

func (r *searchResult) report(target float64) *searchReport {
	rep := &searchReport{TargetSQNR: compare.DB(target), Start: r.Start, Reached: r.Reached, Met: r.Met,
		Promoted: []string{}, Trace: r.Trace}
	for _, p := range r.Promoted {
		rep.Promoted = append(rep.Promoted, p.Node)
	}
	if rep.Trace == nil {
		rep.Trace = []searchStep{}
	}
	return rep
}

// searchResult is the outcome of the accuracy search.
type searchResult struct {
	// Unit is the pipeline of the model to write.
	Unit *passes.Unit
	// Config is the emitted config's text.
	Config   []byte
	Promoted []promotion
	// Start and Reached are the worst output's SQNR before and after.
	Start, Reached compare.DB
	Evaluations    int
	Met            bool
	// Trace is every candidate measured, in order.
	Trace []searchStep
}

// searchAccuracy runs the accuracy search on the quantized pipeline u:
// newUnit gives a fresh pipeline to quantize a candidate with. Each
// candidate is quantized from the config text the search emits, so that
// the emitted config writes the model the search chose.
func searchAccuracy(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, u *passes.Unit,
	newUnit func() *passes.Unit, sp sensitivitySplit) (*searchResult, error) {
	so := &opts.Search
	base, err := baseConfigDoc(opts, s)
	if err != nil {
		return nil, err
	}
	res := &searchResult{Unit: u}
	render := func(promoted []promotion) ([]byte, error) {
		return renderSearchConfig(base, promoted, sp, so.TargetSQNR)
	}
	if so.TargetSQNR == nil {
		res.Config, err = render(nil)
		return res, err
	}
	target := compare.DB(*so.TargetSQNR)
	data, err := sp.heldOut(s)
	if err != nil {
		return nil, err
	}
	m, err := compare.NewMeasurer(ctx, s.settings.Engine, s.settings.Threads, s.model, data)
	if err != nil {
		return nil, err
	}
	if res.Start, err = m.Measure(ctx, u.Result.Model); err != nil {
		return nil, fmt.Errorf("quantized model: %w", err)
	}
	res.Reached = res.Start
	errOut := opts.IO.ErrOut
	fmt.Fprintf(errOut, "search: worst output %s dB on %d held-out samples, target %s dB\n", res.Start, m.Samples, target)
	if res.Reached < target {
		sens, err := cachedSensitivity(ctx, opts.IO, s, u, sp, false, nil)
		if err != nil {
			return nil, err
		}
		var ranked []compare.GroupSensitivity
		for _, g := range sens.Groups {
			// Groups named by a value (a point without a node) have no
			// op_name_config entry to write.
			if g.Gain > 0 && u.Model.Graph.Node(g.Group) != nil {
				ranked = append(ranked, g)
			}
		}
		sort.SliceStable(ranked, func(i, j int) bool {
			if ranked[i].Gain != ranked[j].Gain {
				return ranked[i].Gain > ranked[j].Gain
			}
			return ranked[i].Group < ranked[j].Group
		})
		for _, g := range ranked {
			if res.Reached >= target || res.Evaluations >= so.budget() {
				break
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			try := append(append([]promotion{}, res.Promoted...), promotion{Node: g.Group, Gain: g.Gain})
			text, err := render(try)
			if err != nil {
				return nil, err
			}
			cand, err := quantizeFromConfig(ctx, opts, s, newUnit, text)
			if err != nil {
				return nil, fmt.Errorf("candidate with %s left in float: %w", g.Group, err)
			}
			got, err := m.Measure(ctx, cand.Result.Model)
			if err != nil {
				return nil, fmt.Errorf("candidate with %s left in float: %w", g.Group, err)
			}
			res.Evaluations++
			verdict := "kept"
			res.Trace = append(res.Trace, searchStep{Node: g.Group, Gain: g.Gain, SQNR: got, Kept: got > res.Reached})
			if got > res.Reached {
				try[len(try)-1].SQNR = got
				res.Promoted, res.Reached, res.Unit = try, got, cand
			} else {
				verdict = "dropped: no better"
			}
			fmt.Fprintf(errOut, "search %d/%d: %s in float (sensitivity gain %s dB): worst output %s dB, %s\n",
				res.Evaluations, so.budget(), g.Group, g.Gain, got, verdict)
		}
	}
	res.Met = res.Reached >= target
	res.Config, err = render(res.Promoted)
	return res, err
}

// quantizeFromConfig runs the whole pipeline with the quantization config,
// algorithms and palettization of the config text (the other settings
// stay those of s).
func quantizeFromConfig(ctx context.Context, opts *quantizeOptions, s *pipelineSetup, newUnit func() *passes.Unit, text []byte) (*passes.Unit, error) {
	cfg, err := config.Parse(text, searchConfigName(opts))
	if err != nil {
		return nil, fmt.Errorf("emitted config: %w", err)
	}
	cs := *s
	cs.quant, cs.palette, cs.algorithms, cs.notices = cfg.Quant, cfg.Palette, cfg.Algorithms, nil
	if err := cs.algorithms.EnableAlgorithms(opts.Algorithms); err != nil {
		return nil, Usagef("--algorithms: %v", err)
	}
	// The run's notices and warnings were printed for the first model;
	// a candidate's differ only by the entries the search added.
	quiet := *opts
	quiet.IO = &IO{In: opts.IO.In, Out: opts.IO.Out, ErrOut: io.Discard}
	u := newUnit()
	if _, err := runPipeline(ctx, &quiet, &cs, u, ""); err != nil {
		return nil, err
	}
	return u, nil
}

// searchConfigName is the file name candidate configs are read as, which
// places their relative paths where the emitted config's will be.
func searchConfigName(opts *quantizeOptions) string {
	if opts.Search.EmitConfig != "" {
		return opts.Search.EmitConfig
	}
	return "search.yaml"
}

// baseConfigDoc is the config the emitted one starts from: the --config
// file as written, with the --preset's quantization_spec,
// quantization_config and algorithms in place of its own when one is
// given. The entries go in quantization_config.global_config: a config
// without one (a preset reference, a target's defaults, palettization
// only) is refused.
func baseConfigDoc(opts *quantizeOptions, s *pipelineSetup) (*yaml.Node, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	if opts.Config != "" {
		b, err := os.ReadFile(opts.Config)
		if err != nil {
			return nil, err
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, &UsageError{Err: fmt.Errorf("%s: %w", opts.Config, err)}
		}
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			root = doc.Content[0]
		}
	}
	if s.settings.Preset != "" {
		b, err := config.PresetYAML(s.settings.Preset)
		if err != nil {
			return nil, &UsageError{Err: err}
		}
		var preset yaml.Node
		if err := yaml.Unmarshal(b, &preset); err != nil {
			return nil, err
		}
		for _, k := range []string{"quantization_spec", "quantization_config", "algorithms"} {
			deleteKey(root, k)
		}
		root.Content = append(root.Content, preset.Content[0].Content...)
		return root, nil
	}
	if globalConfig(root) == nil {
		return nil, Usagef("--target-sqnr and --emit-config add op_name_config entries to quantization_config.global_config, which %s does not have as a mapping: give --preset, or write the global_config out (coreaiq presets NAME prints one)", opts.Config)
	}
	return root, nil
}

// renderSearchConfig writes base with calibration.samples set to the
// samples calibrated on (the held-out ones excluded, so that quantize
// without --eval-samples calibrates on the same ones) and an
// op_name_config null entry per promoted node.
func renderSearchConfig(base *yaml.Node, promoted []promotion, sp sensitivitySplit, target *float64) ([]byte, error) {
	root := cloneNode(base)
	if sp.source != nil {
		cal := ensureMapping(root, "calibration")
		setKey(cal, "samples", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(sp.calibSamples)},
			"calibrated on the samples before the held-out ones")
	}
	if len(promoted) > 0 {
		names := ensureMapping(globalConfig(root), "op_name_config")
		for _, p := range promoted {
			setKey(names, config.OpNameKey(p.Node), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"},
				fmt.Sprintf("left in float: +%s dB alone in the sensitivity analysis; worst output %s dB with it", p.Gain, p.SQNR))
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	head := "written by coreaiq quantize --emit-config"
	if target != nil {
		head += fmt.Sprintf(" (--target-sqnr %s)", compare.DB(*target))
	}
	doc.HeadComment = head
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// globalConfig is the mapping of quantization_config.global_config in
// the config root, nil when there is none.
func globalConfig(root *yaml.Node) *yaml.Node {
	v := root
	for _, k := range []string{"quantization_config", "global_config"} {
		if v = mappingValue(v, k); v == nil {
			return nil
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if v.Kind != yaml.MappingNode {
			return nil
		}
	}
	return v
}

// mappingValue is the value of key in the mapping m, nil when absent.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// setKey sets key in the mapping m to v, with comment beside the key.
func setKey(m *yaml.Node, key string, v *yaml.Node, comment string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			m.Content[i].LineComment = "# " + comment
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, LineComment: "# " + comment}
	m.Content = append(m.Content, k, v)
}

// ensureMapping is the mapping under key in m, made when absent or null.
func ensureMapping(m *yaml.Node, key string) *yaml.Node {
	v := mappingValue(m, key)
	if v != nil && v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v != nil && v.Kind == yaml.MappingNode {
		v.Style = 0 // block style, where entries have room for comments
		return v
	}
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = n
			return n
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, n)
	return n
}

// cloneNode copies a YAML tree, keeping aliases pointing at the copies of
// their anchors.
func cloneNode(n *yaml.Node) *yaml.Node {
	copies := map[*yaml.Node]*yaml.Node{}
	var clone func(n *yaml.Node) *yaml.Node
	clone = func(n *yaml.Node) *yaml.Node {
		if n == nil {
			return nil
		}
		if c, ok := copies[n]; ok {
			return c
		}
		c := *n
		copies[n] = &c
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, k := range n.Content {
			c.Content[i] = clone(k)
		}
		c.Alias = clone(n.Alias)
		return &c
	}
	return clone(n)
}

// searchGateError is the exit-3 error of a search that fell short.
func searchGateError(target float64, r *searchResult) error {
	return &GateError{Err: fmt.Errorf("--target-sqnr %s dB not met within --search-budget: the worst output reaches %s dB (from %s dB) with %d node(s) left in float after %d evaluation(s); the best model found was written",
		compare.DB(target), r.Reached, r.Start, len(r.Promoted), r.Evaluations)}
}
