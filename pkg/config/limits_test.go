package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadFileLimits: special files are refused before they are read, a
// file over MaxFileSize is refused from its size, and a file with
// thousands of errors reports the first ones and a count.
func TestLoadFileLimits(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	var b strings.Builder
	for i := 0; b.Len() <= MaxFileSize; i++ {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	os.WriteFile(big, []byte(b.String()), 0o644)
	many := filepath.Join(dir, "many.yaml")
	b.Reset()
	for i := range 5000 {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	os.WriteFile(many, []byte(b.String()), 0o644)
	tests := []struct {
		path string
		want string
	}{
		{"/dev/zero", "/dev/zero is not a regular file (a character device)"},
		{fifo, "is not a regular file (a named pipe)"},
		{dir, "is not a regular file (a directory)"},
		{big, fmt.Sprintf("bytes, over the limit of %d", MaxFileSize)},
		{many, "many.yaml:50:1: ... and 4951 more errors"},
	}
	for _, tt := range tests {
		_, err := LoadFile(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("LoadFile(%s) = %v, want it to name the file and say %q", tt.path, err, tt.want)
		}
		if list, ok := err.(ErrorList); ok && len(list) > maxReported {
			t.Errorf("LoadFile(%s) reports %d errors, want at most %d", tt.path, len(list), maxReported)
		}
	}
}

// FuzzParseDataEntry: any entry parses or fails with an error; what
// parses writes back to a string that parses to the same entry.
func FuzzParseDataEntry(f *testing.F) {
	for _, s := range []string{"calib.npy", "images=calib.npy", "state=h.npy:axis=1", "a=b=c.npy", ":axis=2", "x=:axis=-1", "d/e.npy:axis=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseDataEntry(s)
		if err != nil {
			return
		}
		back, err := ParseDataEntry(e.String())
		if err != nil || back != e {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, e, e.String(), back, err)
		}
	})
}
