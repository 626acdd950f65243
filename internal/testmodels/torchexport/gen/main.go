// Command gen writes the torch-export test graphs (package torchexport)
// into a directory: guide_dynamo.onnx and guide_torchscript.onnx.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/coreaiq/coreaiq/internal/testmodels/torchexport"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	for name, dynamo := range map[string]bool{"guide_dynamo.onnx": true, "guide_torchscript.onnx": false} {
		if err := os.WriteFile(filepath.Join(os.Args[1], name), torchexport.GuideNet(dynamo), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
