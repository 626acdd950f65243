// Command coreaiq quantizes ONNX models.
package main

import (
	"os"

	"github.com/coreaiq/coreaiq/internal/cli"
)

func main() { os.Exit(cli.Main()) }
