package llama

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testutil/enginetest"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

func load(t *testing.T, c Config) *onnxgraph.Model {
	t.Helper()
	b, err := Bytes(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnxgraph.LoadBytes(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func floats(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	f, err := x.AsFloat32()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var ids = []int64{5, 17, 3, 90, 42, 8, 61}

// TestDecoderRunsAndIsCausal runs the tiny decoder on a sequence and on its
// prefix: the prefix's logits must not depend on the tokens after it.
func TestDecoderRunsAndIsCausal(t *testing.T) {
	for _, c := range []Config{Tiny(), func() Config { c := Tiny(); c.Tied = true; return c }()} {
		t.Run(fmt.Sprintf("tied=%v", c.Tied), func(t *testing.T) {
			m := load(t, c)
			full := floats(t, enginetest.Run(t, m, map[string]*tensor.Tensor{"input_ids": tensor.FromInt64(ids, 1, len(ids))})["logits"])
			prefix := floats(t, enginetest.Run(t, m, map[string]*tensor.Tensor{"input_ids": tensor.FromInt64(ids[:3], 1, 3)})["logits"])
			if len(full) != len(ids)*c.Vocab {
				t.Fatalf("%d logits, want %d", len(full), len(ids)*c.Vocab)
			}
			var spread float64
			for i, v := range prefix {
				if d := math.Abs(float64(v - full[i])); d > 1e-5 {
					t.Fatalf("logit %d of the prefix is %g alone and %g in the full sequence", i, v, full[i])
				}
				spread += math.Abs(float64(v - prefix[0]))
			}
			if spread == 0 || math.IsNaN(spread) {
				t.Fatalf("logits are constant or NaN: %v", prefix[:8])
			}
		})
	}
}

// TestKVCacheMatchesFullRun feeds the sequence's last token with the
// present of its prefix as past: its logits are the full run's last row.
func TestKVCacheMatchesFullRun(t *testing.T) {
	c := Tiny()
	c.KVCache = true
	m := load(t, c)
	hd := c.HeadDim()
	empty := map[string]*tensor.Tensor{}
	for i := range c.Layers {
		for _, kv := range []string{"key", "value"} {
			empty[fmt.Sprintf("past_key_values.%d.%s", i, kv)] = tensor.FromFloat32(nil, 1, c.Heads, 0, hd)
		}
	}
	n := len(ids)
	withIDs := func(past map[string]*tensor.Tensor, x []int64) map[string]*tensor.Tensor {
		in := map[string]*tensor.Tensor{"input_ids": tensor.FromInt64(x, 1, len(x))}
		for k, v := range past {
			in[k] = v
		}
		return in
	}
	full := enginetest.Run(t, m, withIDs(empty, ids))
	first := enginetest.Run(t, m, withIDs(empty, ids[:n-1]))
	past := map[string]*tensor.Tensor{}
	for i := range c.Layers {
		for _, kv := range []string{"key", "value"} {
			past[fmt.Sprintf("past_key_values.%d.%s", i, kv)] = first[fmt.Sprintf("present.%d.%s", i, kv)]
		}
	}
	step := floats(t, enginetest.Run(t, m, withIDs(past, ids[n-1:]))["logits"])
	want := floats(t, full["logits"])[(n-1)*c.Vocab:]
	for i := range want {
		if d := math.Abs(float64(step[i] - want[i])); d > 1e-5 {
			t.Fatalf("logit %d: %g with the cache, %g without", i, step[i], want[i])
		}
	}
	if got := full["present.0.key"].Shape; got[2] != n {
		t.Fatalf("present.0.key has shape %v, want %d positions", got, n)
	}
}

// TestExternalDataMatchesInline writes the decoder with external data and
// checks it loads to the same weights as the one-file model, and that the
// bytes do not change from one generation to the next.
func TestExternalDataMatchesInline(t *testing.T) {
	c := Tiny()
	c.FP16 = true
	dir := t.TempDir()
	path := filepath.Join(dir, "llama.onnx")
	if err := Write(c, path, true); err != nil {
		t.Fatal(err)
	}
	ext, err := onnxgraph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	inl := load(t, c)
	for _, init := range inl.Proto.Graph.Initializer {
		v := ext.Graph.Value(init.GetName())
		if v == nil || v.Const == nil {
			t.Fatalf("initializer %q missing from the external-data model", init.GetName())
		}
		a, err := tensor.FromProto(v.Const, ext)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tensor.FromProto(init, inl)
		if err != nil {
			t.Fatal(err)
		}
		if a.DType != tensor.Float16 && a.DType != tensor.Int64 {
			t.Fatalf("%q is %s in an fp16 model", init.GetName(), a.DType)
		}
		if fmt.Sprint(a.Data) != fmt.Sprint(b.Data) {
			t.Fatalf("%q differs between external and inline data", init.GetName())
		}
	}
	for _, init := range ext.Proto.Graph.Initializer {
		if small := len(init.GetRawData()) > 0; onnxgraph.IsExternal(init) == small {
			t.Errorf("%q: external %v with %d inline bytes (tensors under %d bytes stay inline)", init.GetName(), onnxgraph.IsExternal(init), len(init.GetRawData()), externalMin)
		}
	}
	again := filepath.Join(dir, "again.onnx")
	if err := Write(c, again, true); err != nil {
		t.Fatal(err)
	}
	d1, _ := os.ReadFile(path + ".data")
	d2, _ := os.ReadFile(again + ".data")
	if len(d1) == 0 || !bytes.Equal(d1, d2) {
		t.Fatalf("external data differs between two generations (%d and %d bytes)", len(d1), len(d2))
	}
}

func TestParamsCountsInitializers(t *testing.T) {
	for _, tied := range []bool{false, true} {
		c := Tiny()
		c.Tied = tied
		m := load(t, c)
		var n int64
		for _, init := range m.Proto.Graph.Initializer {
			if init.GetDataType() == int32(tensor.Int64) || len(init.Dims) == 0 {
				continue
			}
			e := int64(1)
			for _, d := range init.Dims {
				e *= d
			}
			n += e
		}
		if n != c.Params() {
			t.Errorf("tied=%v: %d weights in the model, Params says %d", tied, n, c.Params())
		}
	}
}
