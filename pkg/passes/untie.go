package passes

import (
	"fmt"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/finalize"
	"github.com/coreaiq/coreaiq/pkg/spec"
)

// untieTables gives a tied lm_head (finalize.Tie) a weight of its own
// when the config quantizes it otherwise than the embedding Gathers that
// read the same table: each then gets its own spec, as module names ask.
// When both get the same spec the table stays one tensor, read by both:
// a second copy of a vocabulary table is hundreds of megabytes at
// billions of parameters. A note says which it was, tie by tie.
//
// The specs come from resolving the config against the model with every
// tie undone in shape only (no weight bytes copied or read).
func untieTables(u *Unit) error {
	ties := finalize.TiedTables(u.Model)
	if len(ties) == 0 || u.Config == nil {
		return nil
	}
	probe, err := finalize.Untie(u.Model, ties, finalize.UntieOptions{ShapeOnly: true})
	if err != nil {
		return err
	}
	res, err := resolveFor(u.Config, probe.Graph, u.Prepare)
	if err != nil {
		return err
	}
	// A node the target runs in float keeps its weight float whatever
	// the config says (an embedding Gather under ort-x86).
	floatWhy := place(probe.Graph, res, u.Prepare.Target).floatWhy
	stateSpec := func(node string, index int) *spec.QuantizationSpec {
		if floatWhy[node] != "" {
			return nil
		}
		return stateSpecOf(res, node, index)
	}
	var apart []finalize.Tie
	for _, tie := range ties {
		head := stateSpec(tie.Head.Name, 1)
		reads := tie.Head.String()
		if tie.Transpose != nil {
			reads += " through " + tie.Transpose.String()
		}
		differs := ""
		for _, g := range tie.Gathers {
			if s := stateSpec(g.Name, 0); !sameGroups(s, head, tie.Transpose != nil) {
				differs = fmt.Sprintf("%s gets %s, %s gets %s", g, specText(s), tie.Head, specText(head))
				break
			}
		}
		if differs == "" {
			u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("embedding table %q, read by %s: kept tied, one table for both: the config gives both %s",
				tie.Table.Name, reads, specText(stateSpec(tie.Gathers[0].Name, 0))))
			continue
		}
		apart = append(apart, tie)
		u.Plan.Notes = append(u.Plan.Notes, fmt.Sprintf("embedding table %q, read by %s: untied: %s; the head reads a copy of its own, %q",
			tie.Table.Name, reads, differs, tie.Weight))
	}
	if len(apart) == 0 {
		return nil
	}
	m, err := finalize.Untie(u.Model, apart, finalize.UntieOptions{Scratch: u.Write.Scratch})
	if err != nil {
		return err
	}
	u.Model, u.ownsModel = m, true
	return nil
}

// stateSpecOf is the spec the resolution gives input index of node name
// as a state, nil for none (float).
func stateSpecOf(res *config.Resolution, name string, index int) *spec.QuantizationSpec {
	nr := res.Node(name)
	if nr == nil {
		return nil
	}
	for _, t := range nr.Tensors {
		if t.Role == config.RoleState && t.Index == index {
			return t.Spec
		}
	}
	return nil
}

// sameGroups reports whether the table quantized with spec table and its
// head's weight quantized with head come out as the same tensor: the same
// spec, on the same axis of the table (the head's axes swapped when it
// reads the table transposed).
func sameGroups(table, head *spec.QuantizationSpec, transposed bool) bool {
	if table == nil || head == nil {
		return table == head
	}
	if transposed && head.Granularity.Axis != nil {
		h := head.Clone()
		axis := 1 - *head.Granularity.Axis
		h.Granularity.Axis = &axis
		head = h
	}
	return table.Equal(head)
}

// specText is a spec as notes print it, "float" for none.
func specText(s *spec.QuantizationSpec) string {
	if s == nil {
		return "float"
	}
	return s.String()
}
