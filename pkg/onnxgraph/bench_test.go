package onnxgraph

import (
	"fmt"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// model100MB has 100 initializers of 1 MiB and 2000 nodes.
func model100MB() []byte {
	b := testmodels.New("big", 17)
	b.Input("x", tensor.Float, "N", 512).Output("y", tensor.Float, "N", 512)
	prev := "x"
	for i := range 2000 {
		out := fmt.Sprintf("h%d", i)
		if i == 1999 {
			out = "y"
		}
		if i < 100 {
			w := fmt.Sprintf("w%d", i)
			b.Init(w, []int64{512, 512}, make([]float32, 512*512))
			b.Node("MatMul", fmt.Sprintf("/layers.%d/fc/MatMul", i), []string{prev, w}, []string{out})
		} else {
			b.Node("Relu", fmt.Sprintf("/layers.%d/act/Relu", i), []string{prev}, []string{out})
		}
		prev = out
	}
	return b.Bytes()
}

func BenchmarkLoad100MB(b *testing.B) {
	data := model100MB()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := LoadBytes(data, ""); err != nil {
			b.Fatal(err)
		}
	}
}
