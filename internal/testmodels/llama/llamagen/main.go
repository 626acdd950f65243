// Command llamagen writes a Llama-shaped decoder (package llama) to a file,
// for the benchmark and for trying coreaiq on a language model without
// downloading one.
//
//	go run ./internal/testmodels/llama/llamagen -size 1.26b -external -o /tmp/l1b/llama.onnx
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coreaiq/coreaiq/internal/testmodels/llama"
)

func main() {
	size := flag.String("size", "tiny", "decoder size: "+strings.Join(sizes(), ", "))
	out := flag.String("o", "llama.onnx", "output model")
	fp16 := flag.Bool("fp16", false, "float16 weights and compute")
	kv := flag.Bool("kv-cache", false, "past_key_values inputs and present outputs")
	tied := flag.Bool("tied", false, "lm_head reads the embedding table")
	ext := flag.Bool("external", false, "weights in external data (OUT.data)")
	flag.Parse()
	c, ok := llama.Sizes[*size]
	if !ok {
		fmt.Fprintf(os.Stderr, "llamagen: unknown size %q (have %s)\n", *size, strings.Join(sizes(), ", "))
		os.Exit(2)
	}
	c.FP16, c.KVCache, c.Tied = *fp16, *kv, *tied
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "llamagen:", err)
		os.Exit(1)
	}
	if err := llama.Write(c, *out, *ext); err != nil {
		fmt.Fprintln(os.Stderr, "llamagen:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d parameters\n", *out, c.Params())
}

func sizes() []string {
	var s []string
	for k := range llama.Sizes {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
