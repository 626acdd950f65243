package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// optional is a flag bound to a pointer field that stays nil until the
// flag is given, so that a setting given on the command line can be told
// from its default without asking the flag set.
type optional[T any] struct {
	p     **T
	parse func(string) (T, error)
	typ   string
	def   string
}

func (o *optional[T]) Set(s string) error {
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o *optional[T]) String() string {
	if *o.p == nil {
		return o.def
	}
	return fmt.Sprint(**o.p)
}

func (o *optional[T]) Type() string { return o.typ }

// optString binds an optional string flag; def is only shown in the help.
func optString(f *pflag.FlagSet, p **string, name, short, def, usage string) {
	f.VarP(&optional[string]{p: p, parse: func(s string) (string, error) { return s, nil }, typ: "string", def: def}, name, short, usage)
}

// optInt binds an optional int flag; def is only shown in the help.
func optInt(f *pflag.FlagSet, p **int, name string, def int, usage string) {
	f.Var(&optional[int]{p: p, parse: func(s string) (int, error) {
		v, err := strconv.ParseInt(s, 0, 0)
		return int(v), err
	}, typ: "int", def: strconv.Itoa(def)}, name, usage)
}

// optFloat64 binds an optional float64 flag; def is only shown in the help.
func optFloat64(f *pflag.FlagSet, p **float64, name string, def float64, usage string) {
	f.Var(&optional[float64]{p: p, parse: func(s string) (float64, error) { return strconv.ParseFloat(s, 64) },
		typ: "float64", def: strconv.FormatFloat(def, 'g', -1, 64)}, name, usage)
}

// optStrings is a repeatable string flag (no comma splitting) bound to a
// slice that stays nil until the flag is given.
type optStrings struct{ p *[]string }

func (o optStrings) Set(s string) error {
	*o.p = append(*o.p, s)
	return nil
}

func (o optStrings) String() string {
	if len(*o.p) == 0 {
		return "" // no "(default [])" in the help
	}
	return "[" + strings.Join(*o.p, ",") + "]"
}

func (o optStrings) Type() string { return "stringArray" }

// negatedBool is a bool flag stored negated, so that a flag on by default
// (--op-intrinsics) fills a field whose zero value is the default
// (NoOpIntrinsics).
type negatedBool struct{ p *bool }

func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = !v
	return nil
}

func (b negatedBool) String() string { return strconv.FormatBool(!*b.p) }
func (b negatedBool) Type() string   { return "bool" }

// negBool binds a bool flag, true by default, to the negated field p.
func negBool(f *pflag.FlagSet, p *bool, name, usage string) {
	f.Var(negatedBool{p}, name, usage)
	f.Lookup(name).NoOptDefVal = "true"
}

// usageArgs makes the positional-argument errors of cmd and its
// subcommands usage errors.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return &UsageError{Err: err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// flagUsageError is the command tree's flag-error hook: every flag parse
// error is a usage error.
func flagUsageError(_ *cobra.Command, err error) error { return &UsageError{Err: err} }
