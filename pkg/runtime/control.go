package runtime

import (
	"fmt"

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
