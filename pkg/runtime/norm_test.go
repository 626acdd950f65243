package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// groupNormByHand is group normalization in float64 as the paper defines
// it: the mean and the population variance of each batch entry's group of
// channels, then y = (x − mean)/√(var + eps)·scale[c] + bias[c], scale and
// bias given per channel.
func groupNormByHand(x []float32, shape []int, groups int, scale, bias []float64, eps float64) []float64 {
	c, spatial := shape[1], 1
	for _, d := range shape[2:] {
		spatial *= d
	}
	group := c / groups * spatial
	y := make([]float64, len(x))
	for start := 0; start < len(x); start += group {
		var sum float64
		for _, v := range x[start : start+group] {
			sum += float64(v)
		}
		mean := sum / float64(group)
		var dev float64
		for _, v := range x[start : start+group] {
			dev += (float64(v) - mean) * (float64(v) - mean)
		}
		sd := math.Sqrt(dev/float64(group) + eps)
		for i := start; i < start+group; i++ {
			ch := i / spatial % c
			y[i] = (float64(x[i])-mean)/sd*scale[ch] + bias[ch]
		}
	}
	return y
}

// repeatPerGroup spreads one value per group over the group's channels,
// c channels in all.
func repeatPerGroup(p []float32, c int) []float64 {
	out := make([]float64, c)
	for i := range out {
		out[i] = float64(p[i/(c/len(p))])
	}
	return out
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestGroupNorm checks GroupNormalization against groupNormByHand on
// inputs of rank 3 and 4, with one group, one group per channel and
// groups between, a large epsilon, and an input whose mean dwarfs its
// spread (where a variance taken as E[x²] − E[x]² in float32 is noise):
// at opset 21 with scale and bias per channel, and at opset 18 with scale
// and bias per group, which apply to every channel of the group.
func TestGroupNorm(t *testing.T) {
	tests := []struct {
		name   string
		shape  []int
		groups int
		eps    float32 // 0: the attribute is absent (1e-5)
		offset float32 // added to the random input
	}{
		{"rank4_3groups", []int{2, 6, 3, 2}, 3, 0, 0},
		{"rank3_2groups", []int{2, 4, 5}, 2, 0, 0},
		{"one_group", []int{2, 4, 3, 3}, 1, 0, 0},
		{"group_per_channel", []int{2, 4, 3, 3}, 4, 0, 0},
		{"large_epsilon", []int{1, 4, 2, 2}, 2, 0.75, 0},
		{"mean_dwarfs_spread", []int{2, 4, 8, 8}, 2, 0, 3000},
	}
	for _, tc := range tests {
		x := randomInput(1, tc.shape...)
		for i := range x.Float32s() {
			x.Float32s()[i] += tc.offset
		}
		c := tc.shape[1]
		attrs := []*onnxpb.AttributeProto{testmodels.AttrInt("num_groups", int64(tc.groups))}
		eps := 1e-5
		if tc.eps != 0 {
			attrs = append(attrs, testmodels.AttrFloat("epsilon", tc.eps))
			eps = float64(tc.eps)
		}

		scale, bias := randomInput(2, c), randomInput(3, c)
		got := runOneNode(t, 21, "GroupNormalization", tensor.Float, []*tensor.Tensor{x, scale, bias}, attrs...)
		closeTo(t, tc.name+" opset 21", got, tc.shape, groupNormByHand(x.Float32s(), tc.shape, tc.groups, widen(scale.Float32s()), widen(bias.Float32s()), eps))

		scale, bias = randomInput(4, tc.groups), randomInput(5, tc.groups)
		got = runOneNode(t, 18, "GroupNormalization", tensor.Float, []*tensor.Tensor{x, scale, bias}, attrs...)
		closeTo(t, tc.name+" opset 18", got, tc.shape, groupNormByHand(x.Float32s(), tc.shape, tc.groups, repeatPerGroup(scale.Float32s(), c), repeatPerGroup(bias.Float32s(), c), eps))
	}
}

// TestGroupNormScaleByOpset pins the difference between the two
// definitions on one input of 2 groups of 2 channels: opset 18's scale and
// bias per group give the bits of opset 21's with each value repeated
// over its group's channels, each opset refuses the other's shape, and
// with a group per channel opset 21 gives InstanceNormalization's bits.
func TestGroupNormScaleByOpset(t *testing.T) {
	x := randomInput(6, 2, 4, 3, 3)
	groups := testmodels.AttrInt("num_groups", 2)
	perGroup := []*tensor.Tensor{x, tensor.FromFloat32([]float32{2, -0.5}, 2), tensor.FromFloat32([]float32{0.25, 1}, 2)}
	perChannel := []*tensor.Tensor{x, tensor.FromFloat32([]float32{2, 2, -0.5, -0.5}, 4), tensor.FromFloat32([]float32{0.25, 0.25, 1, 1}, 4)}
	got18 := runOneNode(t, 18, "GroupNormalization", tensor.Float, perGroup, groups)
	got21 := runOneNode(t, 21, "GroupNormalization", tensor.Float, perChannel, groups)
	checkBits(t, "opset 18 against opset 21 with repeated values", got18, x.Shape, got21.Float32s())

	if err := runOneNodeErr(t, 18, "GroupNormalization", perChannel, groups); err == nil || !strings.Contains(err.Error(), "opset 18 has one per group (2)") {
		t.Errorf("opset 18 with per-channel scale: err = %v, want a refusal naming one per group", err)
	}
	if err := runOneNodeErr(t, 21, "GroupNormalization", perGroup, groups); err == nil || !strings.Contains(err.Error(), "opset 21 has one per channel (4)") {
		t.Errorf("opset 21 with per-group scale: err = %v, want a refusal naming one per channel", err)
	}

	scale, bias := randomInput(7, 4), randomInput(8, 4)
	group := runOneNode(t, 21, "GroupNormalization", tensor.Float, []*tensor.Tensor{x, scale, bias}, testmodels.AttrInt("num_groups", 4))
	instance := runOneNode(t, 17, "InstanceNormalization", tensor.Float, []*tensor.Tensor{x, scale, bias})
	checkBits(t, "a group per channel against InstanceNormalization", group, x.Shape, instance.Float32s())
}

// rmsNormByHand is RMS normalization in float64: each row of the axes from
// axis on divided by √(mean of its squares + eps) and multiplied by scale,
// whose axes align with the row's last axes, an axis of 1 repeating.
func rmsNormByHand(x []float32, shape []int, axis int, scale []float32, scaleShape []int, eps float64) []float64 {
	row := shape[axis:]
	n := 1
	for _, d := range row {
		n *= d
	}
	scaleAt := func(j int) float64 {
		k, stride := 0, 1
		for d := len(row) - 1; d >= 0; d-- {
			pos := j % row[d]
			j /= row[d]
			s := d - (len(row) - len(scaleShape))
			if s < 0 {
				continue
			}
			if scaleShape[s] != 1 {
				k += pos * stride
			}
			stride *= scaleShape[s]
		}
		return float64(scale[k])
	}
	y := make([]float64, len(x))
	for start := 0; start < len(x); start += n {
		var sq float64
		for _, v := range x[start : start+n] {
			sq += float64(v) * float64(v)
		}
		rms := math.Sqrt(sq/float64(n) + eps)
		for j := range n {
			y[start+j] = float64(x[start+j]) / rms * scaleAt(j)
		}
	}
	return y
}

// TestRMSNorm checks RMSNormalization against rmsNormByHand over the last
// axis and from axis 1, with a scale of the row's shape and scales that
// broadcast along either axis of the row (one with a leading axis of 1
// beyond the row's rank), and a large epsilon.
func TestRMSNorm(t *testing.T) {
	tests := []struct {
		name       string
		shape      []int
		axis       int64
		scaleShape []int
		eps        float32 // 0: the attribute is absent (1e-5)
	}{
		{"last_axis", []int{2, 3, 8}, -1, []int{8}, 0},
		{"axis1_full_scale", []int{2, 3, 4}, 1, []int{3, 4}, 0},
		{"axis1_scale_along_last", []int{2, 3, 4}, 1, []int{4}, 0},
		{"axis1_scale_along_first", []int{2, 3, 4}, 1, []int{3, 1}, 0},
		{"axis1_scale_leading_one", []int{2, 3, 4}, 1, []int{1, 3, 1}, 0},
		{"large_epsilon", []int{4, 6}, -1, []int{6}, 0.5},
	}
	for _, tc := range tests {
		x := randomInput(11, tc.shape...)
		scale := randomInput(12, tc.scaleShape...)
		attrs := []*onnxpb.AttributeProto{testmodels.AttrInt("axis", tc.axis)}
		eps := 1e-5
		if tc.eps != 0 {
			attrs = append(attrs, testmodels.AttrFloat("epsilon", tc.eps))
			eps = float64(tc.eps)
		}
		ax := int(tc.axis)
		if ax < 0 {
			ax += len(tc.shape)
		}
		got := runOneNode(t, 23, "RMSNormalization", tensor.Float, []*tensor.Tensor{x, scale}, attrs...)
		closeTo(t, tc.name, got, tc.shape, rmsNormByHand(x.Float32s(), tc.shape, ax, scale.Float32s(), tc.scaleShape, eps))
	}
}

// runOneNodeErr runs the model runOneNode runs and returns the error of
// compiling or running it.
func runOneNodeErr(t *testing.T, opset int64, op string, ins []*tensor.Tensor, attrs ...*onnxpb.AttributeProto) error {
	t.Helper()
	b, feed := oneNodeModel(opset, op, tensor.Float, ins, attrs...)
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewGoSession(m, Options{Threads: 1})
	if err != nil {
		return err
	}
	_, err = s.Run(context.Background(), feed, RunOptions{})
	return err
}

// checkUnsupported checks that err reports node as unsupported for
// feature, before anything runs.
func checkUnsupported(t *testing.T, err error, node, feature string) {
	t.Helper()
	var ue *UnsupportedError
	if !errors.As(err, &ue) || len(ue.Items) != 1 || ue.Items[0].Node != node || ue.Items[0].Feature != feature {
		t.Errorf("err = %v, want node %s reported for %q", err, node, feature)
	}
}

// TestNormRefusals checks the stash types the engine refuses and the
// errors of inputs that do not fit, each naming the node.
func TestNormRefusals(t *testing.T) {
	x := randomInput(13, 2, 4, 3)
	stash := testmodels.AttrInt("stash_type", 10)
	checkUnsupported(t, runOneNodeErr(t, 23, "RMSNormalization", []*tensor.Tensor{x, randomInput(14, 3)}, stash),
		"RMSNormalization", "stash_type=10 is not supported")
	checkUnsupported(t, runOneNodeErr(t, 21, "GroupNormalization", []*tensor.Tensor{x, randomInput(14, 4), randomInput(15, 4)}, testmodels.AttrInt("num_groups", 2), stash),
		"GroupNormalization", "stash_type=10 is not supported")
	checkUnsupported(t, runOneNodeErr(t, 17, "LayerNormalization", []*tensor.Tensor{x, randomInput(14, 3)}, stash),
		"LayerNormalization", "stash_type=10 is not supported")

	for _, tc := range []struct {
		name  string
		opset int64
		op    string
		ins   []*tensor.Tensor
		attrs []*onnxpb.AttributeProto
		want  string
	}{
		{"groups_not_dividing", 21, "GroupNormalization", []*tensor.Tensor{x, randomInput(14, 4), randomInput(15, 4)},
			[]*onnxpb.AttributeProto{testmodels.AttrInt("num_groups", 3)}, "num_groups 3 does not divide the 4 channels"},
		{"groups_missing", 21, "GroupNormalization", []*tensor.Tensor{x, randomInput(14, 4), randomInput(15, 4)},
			nil, "attribute num_groups is missing"},
		{"rms_scale_not_broadcastable", 23, "RMSNormalization", []*tensor.Tensor{x, randomInput(14, 2)},
			nil, "input scale [2] does not fit the normalized shape [3]"},
	} {
		err := runOneNodeErr(t, tc.opset, tc.op, tc.ins, tc.attrs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.op) {
			t.Errorf("%s: err = %v, want %q of node %s", tc.name, err, tc.want, tc.op)
		}
	}
}

// sameBitsEveryRun runs op (a node reading ins, as oneNodeModel builds it)
// followed by a Neg, on 1 and 4 threads, three times each on recycled
// buffers filled with NaN (Options.poisonArena), and checks that every run
// gives the first run's bits: the split over threads changes nothing and
// the op writes every element of its output.
func sameBitsEveryRun(t *testing.T, opset int64, op string, ins []*tensor.Tensor, attrs ...*onnxpb.AttributeProto) {
	t.Helper()
	b, feed := oneNodeModel(opset, op, tensor.Float, ins, attrs...)
	b.Model.Graph.Node[0].Output = []string{"h"}
	b.Node("Neg", "neg", []string{"h"}, []string{"y"})
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	var first detRun
	for _, threads := range []int{1, 4} {
		s, err := NewGoSession(m, Options{Threads: threads, poisonArena: true})
		if err != nil {
			t.Fatal(err)
		}
		for run := range 3 {
			r := runCopy(t, s, feed, false, nil)
			if first == nil {
				first = r
				continue
			}
			if err := sameBits(first, r); err != nil {
				t.Fatalf("%s: threads=%d run %d: %v", op, threads, run+1, err)
			}
		}
	}
}

// TestNormThreads checks GroupNormalization and RMSNormalization on inputs
// large enough for several chunks of groups, channel planes and rows.
func TestNormThreads(t *testing.T) {
	x := randomInput(16, 8, 32, 16, 16)
	sameBitsEveryRun(t, 21, "GroupNormalization", []*tensor.Tensor{x, randomInput(17, 32), randomInput(18, 32)}, testmodels.AttrInt("num_groups", 8))
	sameBitsEveryRun(t, 18, "GroupNormalization", []*tensor.Tensor{x, randomInput(17, 8), randomInput(18, 8)}, testmodels.AttrInt("num_groups", 8))
	sameBitsEveryRun(t, 23, "RMSNormalization", []*tensor.Tensor{randomInput(19, 256, 512), randomInput(20, 512)})
	for _, groups := range []int64{1, 32} {
		t.Run(fmt.Sprintf("groups%d", groups), func(t *testing.T) {
			sameBitsEveryRun(t, 21, "GroupNormalization", []*tensor.Tensor{x, randomInput(17, 32), randomInput(18, 32)}, testmodels.AttrInt("num_groups", groups))
		})
	}
}
