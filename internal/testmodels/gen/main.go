// Command gen writes the example models of internal/testmodels into a directory.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/coreaiq/coreaiq/internal/testmodels"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	names := make([]string, 0, len(testmodels.Catalog))
	for name := range testmodels.Catalog {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), testmodels.Catalog[name]().Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
