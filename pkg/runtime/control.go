package runtime

import (
	"fmt"
	"slices"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func buildIf(b *builder) (kernel, error) {
	n := b.n
	thenG, elseG := n.Subgraphs["then_branch"], n.Subgraphs["else_branch"]
	if thenG == nil || elseG == nil {
		return nil, fmt.Errorf("the node needs then_branch and else_branch")
	}
	thenP, err := b.c.compileGraph(thenG, n.OuterInputs, nil)
	if err != nil {
		return nil, fmt.Errorf("then_branch: %w", err)
	}
	elseP, err := b.c.compileGraph(elseG, n.OuterInputs, nil)
	if err != nil {
		return nil, fmt.Errorf("else_branch: %w", err)
	}
	nIn := len(n.Inputs)
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		c := in[0]
		if c.Len() != 1 {
			return nil, fmt.Errorf("cond must have one element, has shape %v", c.Shape)
		}
		cv := asInt64(c)
		p := elseP
		if len(cv) == 1 && cv[0] != 0 {
			p = thenP
		}
		return p.run(rc, nil, in[nIn:])
	}, nil
}

// buildLoop runs the body graph while the trip count M (when given) is
// not reached and cond (when given) holds:
//
//	i, c, v := 0, cond, v_initial
//	while (M omitted or i < M) and (cond omitted or c):
//	    c, v, s_i = body(i, c, v)
//	    i++
//	outputs: v, and each scan output s stacked along a new first axis
//
// A Loop with neither M nor cond has no end and is refused.
func buildLoop(b *builder) (kernel, error) {
	n := b.n
	p, err := compileBody(b)
	if err != nil {
		return nil, err
	}
	nIn := len(n.Inputs)
	carried := nIn - 2
	if carried < 0 || len(p.inputs) != carried+2 || len(p.outputs) < carried+1 {
		return nil, fmt.Errorf("the body has %d inputs and %d outputs for %d loop-carried values", len(p.inputs), len(p.outputs), carried)
	}
	scans := len(p.outputs) - 1 - carried
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		trips, limited := int64(0), in[0] != nil
		if limited {
			v := asInt64(in[0])
			if len(v) != 1 {
				return nil, fmt.Errorf("the trip count (input M) must have one element, has shape %v", in[0].Shape)
			}
			trips = v[0]
		}
		cond, conditional := true, in[1] != nil
		if conditional {
			c, err := scalarBool(in[1], "cond")
			if err != nil {
				return nil, err
			}
			cond = c
		}
		if !limited && !conditional {
			return nil, fmt.Errorf("neither M nor cond is given: the loop would not end")
		}
		state := slices.Clone(in[2:nIn])
		outer := in[nIn:]
		stacks := make([][]*tensor.Tensor, scans)
		for i := int64(0); (!limited || i < trips) && cond; i++ {
			if err := rc.ctx.Err(); err != nil {
				return nil, err
			}
			feeds := append([]*tensor.Tensor{tensor.FromInt64([]int64{i}), boolScalar(cond)}, state...)
			outs, err := p.run(rc, feeds, outer)
			if err != nil {
				return nil, fmt.Errorf("iteration %d: %w", i, err)
			}
			c, err := scalarBool(outs[0], "the body's cond output")
			if err != nil {
				return nil, fmt.Errorf("iteration %d: %w", i, err)
			}
			if conditional {
				cond = c
			}
			copy(state, outs[1:1+carried])
			for k := range stacks {
				stacks[k] = append(stacks[k], outs[1+carried+k])
			}
		}
		res := state
		for k, parts := range stacks {
			st, err := stack(rc, parts, 0, p.graph.Outputs[1+carried+k].DType())
			if err != nil {
				return nil, fmt.Errorf("scan output %d: %w", k, err)
			}
			res = append(res, st)
		}
		return res, nil
	}, nil
}

// buildScan runs the body once per slice of the scan inputs (opset 9 on):
//
//	s := initial state
//	for t over the scan axis (each scan input in its direction):
//	    s, y_t = body(s, x_1[t], …, x_M[t])
//	outputs: s, and each y stacked along its output axis (in its direction)
func buildScan(b *builder) (kernel, error) {
	n := b.n
	p, err := compileBody(b)
	if err != nil {
		return nil, err
	}
	nIn := len(n.Inputs)
	m := int(b.int("num_scan_inputs", 0))
	states := nIn - m
	if m < 1 || states < 0 || len(p.inputs) != nIn || len(p.outputs) < states {
		return nil, fmt.Errorf("num_scan_inputs %d does not fit %d inputs and a body of %d inputs and %d outputs", m, nIn, len(p.inputs), len(p.outputs))
	}
	k := len(p.outputs) - states
	attr := func(name string, count int) ([]int64, error) {
		v := b.ints(name)
		if v == nil {
			return make([]int64, count), nil
		}
		if len(v) != count {
			return nil, fmt.Errorf("%s %v: want %d values", name, v, count)
		}
		return v, nil
	}
	inAxes, err := attr("scan_input_axes", m)
	if err != nil {
		return nil, err
	}
	inDirs, err := attr("scan_input_directions", m)
	if err != nil {
		return nil, err
	}
	outAxes, err := attr("scan_output_axes", k)
	if err != nil {
		return nil, err
	}
	outDirs, err := attr("scan_output_directions", k)
	if err != nil {
		return nil, err
	}
	return func(rc *runCtx, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		state := slices.Clone(in[:states])
		scanIn := in[states:nIn]
		outer := in[nIn:]
		axes := make([]int, m)
		steps := -1
		for j, x := range scanIn {
			ax, err := normAxis(inAxes[j], len(x.Shape))
			if err != nil {
				return nil, fmt.Errorf("scan input %d: %w", j, err)
			}
			axes[j] = ax
			if steps >= 0 && x.Shape[ax] != steps {
				return nil, fmt.Errorf("scan input %d has %d steps along axis %d, an earlier one %d", j, x.Shape[ax], ax, steps)
			}
			steps = x.Shape[ax]
		}
		stacks := make([][]*tensor.Tensor, k)
		for t := range steps {
			if err := rc.ctx.Err(); err != nil {
				return nil, err
			}
			feeds := slices.Clone(state)
			for j, x := range scanIn {
				at := t
				if inDirs[j] != 0 {
					at = steps - 1 - t
				}
				sl := sliceAxis(nil, x, axes[j], at, 1)
				feeds = append(feeds, &tensor.Tensor{DType: sl.DType, Shape: slices.Delete(slices.Clone(sl.Shape), axes[j], axes[j]+1), Data: sl.Data})
			}
			outs, err := p.run(rc, feeds, outer)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", t, err)
			}
			copy(state, outs[:states])
			for o := range stacks {
				stacks[o] = append(stacks[o], outs[states+o])
			}
		}
		res := state
		for o, parts := range stacks {
			if outDirs[o] != 0 {
				slices.Reverse(parts)
			}
			rank := 1
			if len(parts) > 0 {
				rank += len(parts[0].Shape)
			}
			ax, err := normAxis(outAxes[o], rank)
			if err != nil {
				return nil, fmt.Errorf("scan output %d: %w", o, err)
			}
			st, err := stack(rc, parts, ax, p.graph.Outputs[states+o].DType())
			if err != nil {
				return nil, fmt.Errorf("scan output %d: %w", o, err)
			}
			res = append(res, st)
		}
		return res, nil
	}, nil
}

// stack joins parts of one shape along a new axis ax; no parts give an
// empty tensor of type dt (the body's declared output type).
func stack(rc *runCtx, parts []*tensor.Tensor, ax int, dt tensor.DType) (*tensor.Tensor, error) {
	if len(parts) == 0 {
		if dt == tensor.Undefined {
			dt = tensor.Float
		}
		return tensor.New(dt, 0), nil
	}
	views := make([]*tensor.Tensor, len(parts))
	for i, t := range parts {
		if !slices.Equal(t.Shape, parts[0].Shape) {
			return nil, fmt.Errorf("iteration %d gives shape %v, the first %v", i, t.Shape, parts[0].Shape)
		}
		views[i] = &tensor.Tensor{DType: t.DType, Shape: slices.Insert(slices.Clone(t.Shape), ax, 1), Data: t.Data}
	}
	return concat(rc, views, int64(ax))
}

// scalarBool reads a one-element boolean tensor.
func scalarBool(t *tensor.Tensor, what string) (bool, error) {
	if t == nil || t.Len() != 1 {
		return false, fmt.Errorf("%s must have one element", what)
	}
	return asInt64(t)[0] != 0, nil
}

// boolScalar is a boolean scalar tensor.
func boolScalar(v bool) *tensor.Tensor {
	t := tensor.New(tensor.Bool)
	t.Data.([]bool)[0] = v
	return t
}

// compileBody compiles the "body" subgraph of a Loop or Scan node, which
// reads values of the enclosing graphs by name.
func compileBody(b *builder) (*program, error) {
	body := b.n.Subgraphs["body"]
	if body == nil {
		return nil, fmt.Errorf("the node needs a body")
	}
	p, err := b.c.compileGraph(body, b.n.OuterInputs, nil)
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	return p, nil
}
