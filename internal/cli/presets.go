package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/config"
)

type presetsOptions struct {
	IO   *IO
	Name string
}

// NewCmdPresets builds `coreaiq presets [NAME]`.
func NewCmdPresets(streams *IO, runF func(*presetsOptions) error) *cobra.Command {
	opts := &presetsOptions{IO: streams}
	return &cobra.Command{
		Use:   "presets [NAME]",
		Short: "List the built-in quantization presets, or print one as a config",
		Long: "Without NAME, list the presets. With NAME, print the preset as a config file\n" +
			"(quantization_spec and quantization_config) to copy and edit, or to use as\n" +
			"`quantization_config: {preset: NAME}`.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Name = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return runPresets(opts)
		},
	}
}

func runPresets(opts *presetsOptions) error {
	if opts.Name != "" {
		b, err := config.PresetYAML(opts.Name)
		if err != nil {
			return &UsageError{Err: err}
		}
		_, err = opts.IO.Out.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	for _, p := range config.Presets() {
		mark := ""
		if p.Name == config.DefaultPreset {
			mark = " *"
		}
		fmt.Fprintf(tw, "%s%s\t%s\n", p.Name, mark, p.Description)
	}
	return tw.Flush()
}
