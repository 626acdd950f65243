package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

// NewCmdPrepare builds `coreaiq prepare`: the resolved per-tensor plan
// (specs, rules, shared groups, weight qparams, skipped nodes) as JSON,
// without data.
func NewCmdPrepare(streams *IO, runF func(*quantizeOptions) error) *cobra.Command {
	opts := &quantizeOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "prepare --config FILE [-o plan.json]",
		Short: "Resolve the config against the model into a per-tensor plan (no data needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runPrepare(cmd.Context(), opts)
		},
	}
	addPipelineFlags(cmd, opts)
	return cmd
}

func runPrepare(ctx context.Context, opts *quantizeOptions) error {
	// The plan goes where -o says, never to the config's output: (the
	// quantized model's path).
	out := ""
	if opts.Settings.Output != nil {
		out = *opts.Settings.Output
	}
	s, err := setupPipeline(opts, nil, func(config.Settings) []output {
		if out == "-" {
			return nil
		}
		return []output{{Flag: "-o", Path: out}}
	})
	if err != nil {
		return err
	}
	defer s.outputs.Discard()
	u := &passes.Unit{}
	if _, err := runPipeline(ctx, opts, s, u, "prepare"); err != nil {
		return err
	}
	if out == "" || out == "-" {
		return u.Plan.WriteJSON(opts.IO.Out)
	}
	var b bytesBuffer
	if err := u.Plan.WriteJSON(&b); err != nil {
		return err
	}
	if err := onnxgraph.WriteFileAtomic(s.outputs.Staged(out), b.Bytes()); err != nil {
		return err
	}
	return s.outputs.Commit()
}
