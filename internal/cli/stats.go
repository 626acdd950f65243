package cli

import (
	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/calibrate"
)

type statsMergeOptions struct {
	IO     *IO
	Inputs []string
	Output string
}

// NewCmdStats builds `coreaiq stats` and its `merge` subcommand.
func NewCmdStats(streams *IO, runF func(*statsMergeOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Work with calibration stats files",
		Args:  cobra.NoArgs,
	}
	opts := &statsMergeOptions{IO: streams}
	merge := &cobra.Command{
		Use:   "merge A B ... -o OUT",
		Short: "Merge the stats of calibration shards into one file",
		Long: "Merge stats files made by `coreaiq calibrate --shard i/n` from the same model.\n" +
			"Min/max and histograms merge exactly (the result equals one pass over all the\n" +
			"data, whatever the batch size); moving averages are refused, since no merge of\n" +
			"shards gives what one pass does.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Inputs = args
			if runF != nil {
				return runF(opts)
			}
			return runStatsMerge(opts)
		},
	}
	merge.Flags().StringVarP(&opts.Output, "output", "o", "", "merged stats file (default: stdout)")
	cmd.AddCommand(merge)
	return cmd
}

func runStatsMerge(opts *statsMergeOptions) error {
	var out []output
	if opts.Output != "-" {
		out = append(out, output{Flag: "-o", Path: opts.Output})
	}
	plan, err := planOutputs(opts.Inputs, out...)
	if err != nil {
		return err
	}
	defer plan.Discard()
	var all []*calibrate.Stats
	for _, p := range opts.Inputs {
		s, err := calibrate.ReadFile(p)
		if err != nil {
			return &UsageError{Err: err}
		}
		all = append(all, s)
	}
	m, err := calibrate.Merge(all...)
	if err != nil {
		return &UsageError{Err: err}
	}
	if opts.Output == "" || opts.Output == "-" {
		return m.Write(opts.IO.Out)
	}
	if err := m.WriteFile(plan.Staged(opts.Output)); err != nil {
		return err
	}
	return plan.Commit()
}
