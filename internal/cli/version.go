package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/spf13/cobra"
)

// Version and Commit are set at build time (make release) with
// -ldflags "-X github.com/coreaiq/coreaiq/internal/cli.Version=... -X ...Commit=...".
// Without them, the module version and the VCS revision the go command
// recorded are used when there are any.
var (
	Version = "dev"
	Commit  = ""
)

type versionOptions struct {
	IO *IO
}

// NewCmdVersion builds `coreaiq version`.
func NewCmdVersion(streams *IO, runF func(*versionOptions) error) *cobra.Command {
	opts := &versionOptions{IO: streams}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runVersion(opts)
		},
	}
}

// runVersion prints one line: version, platform, Go version, the commit it
// was built from and the kernel set this process runs (avx512, avx2 or
// portable; see kernels.KernelsEnv).
func runVersion(opts *versionOptions) error {
	v, commit := Version, Commit
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && commit == "" {
				commit = s.Value
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	_, err := fmt.Fprintf(opts.IO.Out, "coreaiq %s %s/%s %s commit %s kernels %s\n",
		v, runtime.GOOS, runtime.GOARCH, runtime.Version(), commit, kernels.ActiveSet())
	return err
}
