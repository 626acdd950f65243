//go:build !noasm && (amd64 || arm64)

package kernels

// flag is b as the 0/1 an assembly kernel takes.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
