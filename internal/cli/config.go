package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/passes"
)

type configValidateOptions struct {
	IO   *IO
	File string
}

// NewCmdConfig builds `coreaiq config` and its subcommands `validate` and
// `schema`.
func NewCmdConfig(streams *IO, runF func(*configValidateOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with config files",
		Args:  cobra.NoArgs,
	}
	opts := &configValidateOptions{IO: streams}
	validate := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a config file: every error at once, with file:line:col",
		Long: "Check a config file strictly: unknown keys, wrong types, bad regexes, unknown dtypes and\n" +
			"impossible specs are errors (exit 2). When the file names a model that exists, the config is\n" +
			"also resolved against it, and keys that match nothing are reported as warnings.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if runF != nil {
				return runF(opts)
			}
			return runConfigValidate(opts)
		},
	}
	schema := &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema (draft 2020-12) of config files, for editors and CI",
		Long: "Print the JSON Schema of config files: every key with its type, enumeration, default and\n" +
			"description, generated from the validator's own key tables. YAML language servers check and\n" +
			"complete a config that names it in a first line `# yaml-language-server: $schema=PATH`.\n" +
			"Rules the schema cannot state (regexes, cross-field rules, names in the model) are checked by\n" +
			"`coreaiq config validate`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := streams.Out.Write(config.JSONSchema())
			return err
		},
	}
	cmd.AddCommand(validate, schema)
	return cmd
}

func runConfigValidate(opts *configValidateOptions) error {
	cfg, err := loadConfig(opts.File)
	if err != nil {
		return err
	}
	for _, n := range cfg.Notices {
		fmt.Fprintf(opts.IO.ErrOut, "notice: %s\n", n.Error())
	}
	checked := "config"
	if m := cfg.FileSettings.Model; m != "" {
		if _, statErr := os.Stat(m); statErr == nil {
			model, err := loadModel(m)
			if err != nil {
				return err
			}
			res, err := passes.Resolve(cfg.Quant, model.Graph)
			if err != nil {
				return configUsageError(err)
			}
			warnings := res.Warnings
			if cfg.Palette != nil {
				pres, err := config.ResolvePalettization(cfg.Palette, model.Graph)
				if err != nil {
					return configUsageError(err)
				}
				warnings = append(warnings, pres.Warnings...)
			}
			for _, w := range warnings {
				fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", w.Error())
			}
			checked = fmt.Sprintf("config (resolved against %s: %d nodes)", m, len(res.Nodes))
		} else {
			fmt.Fprintf(opts.IO.ErrOut, "note: model %s not found; checked the config alone\n", m)
		}
	}
	fmt.Fprintf(opts.IO.Out, "%s: valid %s\n", opts.File, checked)
	return nil
}

// loadConfig reads a config file; an invalid one is a usage error (exit 2)
// listing every problem.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.LoadFile(path)
	if err != nil {
		return nil, configUsageError(err)
	}
	return cfg, nil
}

// configUsageError wraps config errors as a UsageError; an ErrorList is
// printed one error per line after a count.
func configUsageError(err error) error {
	var list config.ErrorList
	if errors.As(err, &list) && len(list) > 1 {
		return &UsageError{Err: fmt.Errorf("%d errors in config:\n%w", len(list), err)}
	}
	return &UsageError{Err: err}
}
