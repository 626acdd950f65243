//go:build unix

package cli

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system, all
// threads), and whether the system reports it.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
