//go:build !unix

package cli

import "time"

// processCPU: this system's CPU time is not read.
func processCPU() (time.Duration, bool) { return 0, false }
