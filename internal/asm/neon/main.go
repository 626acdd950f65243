// Command neon generates the arm64 NEON kernels of pkg/kernels, one
// assembly file per family: the SGEMM micro-kernel (gemm_arm64.s), the
// calibration statistics (stats_arm64.s), the quantization-error scores
// (quanterr_arm64.s), the depthwise rows (depthwise_arm64.s), the
// element-wise rows of the epilogue, pooling, Clip and HardSwish
// (epilogue_arm64.s) and the element-wise binary operations
// (binary_arm64.s). Each kernel's comment states its arithmetic against
// the Go reference.
//
// Go's arm64 assembler lacks most vector floating-point instructions
// (FADD, FMUL, FMINNM, FRINTN, by-element FMLA, …); those are written as
// WORDs with the instruction in a comment (see enc.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", ".", "directory the assembly files are written to")
	flag.Parse()
	files := []struct {
		name string
		gen  func(*asmFile)
	}{
		{"gemm_arm64.s", gemm},
		{"stats_arm64.s", stats},
		{"quanterr_arm64.s", quantErr},
		{"depthwise_arm64.s", depthwise},
		{"epilogue_arm64.s", rows},
		{"binary_arm64.s", binary},
	}
	for _, file := range files {
		f := newFile()
		file.gen(f)
		if err := os.WriteFile(filepath.Join(*dir, file.name), []byte(f.b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
