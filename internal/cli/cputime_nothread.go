//go:build !linux

package cli

import "time"

// threadCPU: this system's per-thread CPU time is not read.
func threadCPU() (time.Duration, bool) { return 0, false }
