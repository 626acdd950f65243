package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/coreaiq/coreaiq/internal/cli.Version=...".
var Version = "dev"

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

func runVersion(opts *versionOptions) error {
	v := Version
	if v == "dev" {
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	_, err := fmt.Fprintf(opts.IO.Out, "coreaiq %s %s/%s %s\n", v, runtime.GOOS, runtime.GOARCH, runtime.Version())
	return err
}
