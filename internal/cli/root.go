// Package cli implements the coreaiq command line: one file per command,
// each with an options struct, a NewCmdX constructor and a runX function
// that tests call without a process.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/kernels"
	"github.com/spf13/cobra"
)

// Exit codes of the CLI contract.
const (
	ExitOK      = 0
	ExitFailure = 1 // a runtime failure
	ExitUsage   = 2 // bad usage, or an invalid config or model
	ExitGate    = 3 // a quality gate failed
)

// UsageError marks an error caused by the user's input (flags, config or
// model): the process exits with ExitUsage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// GateError reports a failed quality gate: the process exits with ExitGate.
type GateError struct{ Err error }

func (e *GateError) Error() string { return e.Err.Error() }
func (e *GateError) Unwrap() error { return e.Err }

// IO is where a command reads and writes; tests substitute buffers.
type IO struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// IsTerminal reports whether ErrOut is a terminal (progress bars).
	IsTerminal bool
}

// globalOptions are the flags every command accepts.
type globalOptions struct {
	LogLevel  string
	LogFormat string
}

// Main runs the CLI with the process's arguments and returns the exit code.
func Main() int {
	streams := &IO{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr, IsTerminal: isTerminal(os.Stderr)}
	cleanupOnSignal()
	return Run(context.Background(), streams, os.Args[1:])
}

// Run executes one command line and returns its exit code.
func Run(ctx context.Context, streams *IO, args []string) int {
	root := NewRootCmd(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(streams.ErrOut, "coreaiq: %v\n", err)
	return exitCode(err)
}

func exitCode(err error) int {
	var usage *UsageError
	var gate *GateError
	switch {
	case errors.As(err, &gate):
		return ExitGate
	case errors.As(err, &usage):
		return ExitUsage
	}
	return ExitFailure
}

// NewRootCmd builds the command tree.
func NewRootCmd(streams *IO) *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "coreaiq",
		Short:         "Quantize ONNX models with coreai-opt configs",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := kernels.KernelSetError(); err != nil {
				return &UsageError{Err: err}
			}
			return setupLogging(streams, g)
		},
		// With Args set, a word that names no command reaches this
		// check (a usage error) instead of cobra's own.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetIn(streams.In)
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.LogFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(
		NewCmdVersion(streams, nil),
		NewCmdInspect(streams, nil),
		NewCmdRun(streams, nil),
		NewCmdCompare(streams, nil),
		NewCmdConfig(streams, nil),
		NewCmdPresets(streams, nil),
		NewCmdOps(streams, nil),
		NewCmdStats(streams, nil),
		NewCmdPrepare(streams, nil),
		NewCmdFinalize(streams, nil),
		NewCmdQuantize(streams, nil),
		NewCmdCalibrate(streams, nil),
		NewCmdBench(streams, nil),
		NewCmdSensitivity(streams, nil),
	)
	root.SetFlagErrorFunc(flagUsageError)
	usageArgs(root)
	return root
}

// unknownCommand is the usage error for a word that names no command, with
// cobra's suggestions.
func unknownCommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return Usagef("%s", msg)
}

func setupLogging(streams *IO, g *globalOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.LogLevel)); err != nil {
		return Usagef("--log-level %q: want debug, info, warn or error", g.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch g.LogFormat {
	case "text":
		h = slog.NewTextHandler(streams.ErrOut, opts)
	case "json":
		h = slog.NewJSONHandler(streams.ErrOut, opts)
	default:
		return Usagef("--log-format %q: want text or json", g.LogFormat)
	}
	slog.SetDefault(slog.New(h))
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
