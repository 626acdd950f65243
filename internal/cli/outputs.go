package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
)

// A command's outputs are checked before any work starts and written all
// or none: planOutputs refuses a destination that is one of the inputs
// (the same file after cleaning the path and following links), a special
// file (device, FIFO, socket, directory) or a directory that is missing or
// not writable, and makes a private staging directory beside each
// destination. Commands write their files into the staging directories
// (Staged), and Commit renames them all into place once every one is
// written; a failure, or SIGINT/SIGTERM, removes the staging directories
// with whatever partial files they hold.

// output is one destination a command was asked to write.
type output struct {
	// Flag names the destination in messages ("-o", "--report").
	Flag string
	Path string
	// Stdout, when set, is where "-" writes: the file is built in a
	// private temp directory and copied there on Commit.
	Stdout io.Writer
}

// outputPlan is a command's checked outputs.
type outputPlan struct {
	staged map[string]string // path as given -> path in a staging directory
	dirs   []string          // staging directories, created by planOutputs
	// stdout is the output given as "-": its staged file and the writer.
	stdout       io.Writer
	stdoutStaged string
}

type stagedMove struct{ from, to string }

// planOutputs checks every output against the inputs and the file system,
// before anything runs. Empty paths are skipped. Errors are UsageErrors.
func planOutputs(inputs []string, outs ...output) (*outputPlan, error) {
	p := &outputPlan{staged: map[string]string{}}
	ins := inputFiles(inputs)
	staging := map[string]string{} // real directory -> staging directory
	seen := map[string]string{}    // real destination -> flag
	for _, o := range outs {
		if o.Path == "" {
			continue
		}
		if o.Path == "-" && o.Stdout != nil {
			sdir, err := makeStagingDir(os.TempDir())
			if err != nil {
				p.Discard()
				return nil, err
			}
			p.dirs = append(p.dirs, sdir)
			p.stdout, p.stdoutStaged = o.Stdout, filepath.Join(sdir, "stdout")
			p.staged[o.Path] = p.stdoutStaged
			continue
		}
		dest, err := checkDestination(o, ins)
		if err != nil {
			p.Discard()
			return nil, err
		}
		if prev, dup := seen[dest]; dup {
			p.Discard()
			return nil, Usagef("%s %s and %s name the same file", prev, o.Path, o.Flag)
		}
		seen[dest] = o.Flag
		dir := filepath.Dir(dest)
		sdir, ok := staging[dir]
		if !ok {
			if sdir, err = makeStagingDir(dir); err != nil {
				p.Discard()
				return nil, Usagef("%s %s: the directory %s is not writable: %v", o.Flag, o.Path, dir, unwrapPathError(err))
			}
			staging[dir] = sdir
			p.dirs = append(p.dirs, sdir)
		}
		p.staged[o.Path] = filepath.Join(sdir, filepath.Base(dest))
	}
	return p, nil
}

// checkDestination returns the real path o will be written to (links
// followed), or a UsageError.
func checkDestination(o output, inputs []inputFile) (string, error) {
	if o.Path == "-" {
		return "", Usagef("%s -: this output cannot go to stdout; name a file", o.Flag)
	}
	dest := filepath.Clean(o.Path)
	if via := linkIntoSpecialFS(dest); via != "" {
		return "", Usagef("%s %s links to %s, a process's file descriptor or a device; coreaiq writes regular files only", o.Flag, o.Path, via)
	}
	if fi, err := os.Stat(dest); err == nil {
		for _, in := range inputs {
			if os.SameFile(fi, in.info) {
				return "", Usagef("%s %s is the input %s: refusing to overwrite it", o.Flag, o.Path, in.path)
			}
		}
		if !fi.Mode().IsRegular() {
			return "", Usagef("%s %s is %s; coreaiq writes regular files only", o.Flag, o.Path, onnxgraph.DescribeFileMode(fi.Mode()))
		}
		// Write through a link to the file it names.
		if real, err := filepath.EvalSymlinks(dest); err == nil {
			dest = real
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", Usagef("%s %s: %v", o.Flag, o.Path, unwrapPathError(err))
	} else if lfi, lerr := os.Lstat(dest); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
		return "", Usagef("%s %s is a symbolic link to a missing file", o.Flag, o.Path)
	}
	dir := filepath.Dir(dest)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return "", Usagef("%s %s: the directory %s does not exist", o.Flag, o.Path, dir)
	case !fi.IsDir():
		return "", Usagef("%s %s: %s is not a directory", o.Flag, o.Path, dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dest = filepath.Join(real, filepath.Base(dest))
	}
	// A model's external data goes beside it as NAME.data.
	if fi, err := os.Stat(dest + ".data"); err == nil {
		for _, in := range inputs {
			if os.SameFile(fi, in.info) {
				return "", Usagef("%s %s would overwrite the input %s (its external data file)", o.Flag, o.Path, in.path)
			}
		}
	}
	return dest, nil
}

// linkIntoSpecialFS follows path's symbolic links (the last component's,
// as the kernel would) and returns the first target inside /proc or /dev,
// or "".
func linkIntoSpecialFS(path string) string {
	for range 40 {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return ""
		}
		target, err := os.Readlink(path)
		if err != nil {
			return ""
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		for _, special := range []string{"/proc/", "/dev/"} {
			if strings.HasPrefix(target, special) {
				return target
			}
		}
		path = target
	}
	return ""
}

// copyToStdout copies the file built for "-" to w.
func copyToStdout(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) > 1 {
		return errors.New("-o -: the model has external data, which cannot go to stdout; name a file")
	}
	_, err = io.Copy(w, f)
	return err
}

// Staged is the path to write the output given as path; "" for "", and
// path itself when nothing was planned (p nil).
func (p *outputPlan) Staged(path string) string {
	if path == "" || p == nil {
		return path
	}
	s, ok := p.staged[path]
	if !ok {
		panic("cli: output " + path + " was not planned")
	}
	return s
}

// Commit moves every staged file (and any companion a writer put beside
// it, such as a model's external data) into place, then removes the
// staging directories.
func (p *outputPlan) Commit() error {
	defer p.Discard()
	if p.stdout != nil {
		if err := copyToStdout(p.stdoutStaged, p.stdout); err != nil {
			return err
		}
	}
	var moves []stagedMove
	for _, sdir := range p.dirs {
		if p.stdoutStaged != "" && sdir == filepath.Dir(p.stdoutStaged) {
			continue
		}
		entries, err := os.ReadDir(sdir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			moves = append(moves, stagedMove{filepath.Join(sdir, e.Name()), filepath.Join(filepath.Dir(sdir), e.Name())})
		}
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i].to < moves[j].to })
	for _, m := range moves {
		if err := os.Rename(m.from, m.to); err != nil {
			return err
		}
	}
	return nil
}

// Discard removes the staging directories and what they hold. It is safe
// to call more than once and after Commit.
func (p *outputPlan) Discard() {
	if p == nil {
		return
	}
	for _, d := range p.dirs {
		removeStagingDir(d)
	}
	p.dirs = nil
}

// inputFile is an input a command reads, for the same-file check.
type inputFile struct {
	path string
	info os.FileInfo
}

// maxInputDirFiles bounds how many files of an input directory (test data
// sets, image folders) the same-file check looks at.
const maxInputDirFiles = 100000

// inputFiles stats the inputs that exist; directories stand for the files
// inside them.
func inputFiles(paths []string) []inputFile {
	var out []inputFile
	for _, p := range paths {
		if p == "" || p == "-" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			out = append(out, inputFile{p, fi})
			continue
		}
		n := 0
		filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || n >= maxInputDirFiles {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				if fi, err := os.Stat(path); err == nil {
					out = append(out, inputFile{path, fi})
					n++
				}
			}
			return nil
		})
	}
	return out
}

// modelInputFiles are the model file and its external data files.
func modelInputFiles(m *onnxgraph.Model) []string {
	if m == nil || m.Path == "" {
		return nil
	}
	files := []string{m.Path}
	seen := map[string]bool{}
	m.AllTensors(func(t *onnxpb.TensorProto) {
		if !onnxgraph.IsExternal(t) || m.InStore(t) {
			return
		}
		if ref, err := onnxgraph.ExternalRefOf(t); err == nil && !seen[ref.Location] {
			seen[ref.Location] = true
			files = append(files, filepath.Join(m.Dir, filepath.FromSlash(ref.Location)))
		}
	})
	return files
}

// dataEntryFiles are the paths a --data entry may name: the entry whole
// and its FILE part.
func dataEntryFiles(entries []string) []string {
	var out []string
	for _, d := range entries {
		out = append(out, d)
		if e, err := config.ParseDataEntry(d); err == nil {
			out = append(out, e.File)
		}
	}
	return out
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// stagingDirs are the staging directories that exist now, for the signal
// handler.
var stagingDirs = struct {
	sync.Mutex
	set map[string]bool
}{set: map[string]bool{}}

const stagingPrefix = ".coreaiq-staging-"

func makeStagingDir(dir string) (string, error) {
	stagingDirs.Lock()
	defer stagingDirs.Unlock()
	d, err := os.MkdirTemp(dir, stagingPrefix+"*")
	if err != nil {
		return "", err
	}
	stagingDirs.set[d] = true
	return d, nil
}

func removeStagingDir(d string) {
	stagingDirs.Lock()
	defer stagingDirs.Unlock()
	os.RemoveAll(d)
	delete(stagingDirs.set, d)
}

// removeAllStaging removes every staging directory; the signal handler
// calls it before the process exits.
func removeAllStaging() {
	stagingDirs.Lock()
	defer stagingDirs.Unlock()
	for d := range stagingDirs.set {
		os.RemoveAll(d)
		delete(stagingDirs.set, d)
	}
}

// cleanupOnSignal removes the staging directories when SIGINT or SIGTERM
// arrives and exits as a shell reports a death by that signal (128+n).
func cleanupOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		removeAllStaging()
		code := 130
		if sig == syscall.SIGTERM {
			code = 143
		}
		fmt.Fprintf(os.Stderr, "coreaiq: %v: stopped; unfinished outputs removed\n", sig)
		os.Exit(code)
	}()
}

// checkInputs refuses a planned output that is one of inputs: the files
// known only once the model is loaded (its external data).
func (p *outputPlan) checkInputs(inputs []string) error {
	if p == nil {
		return nil
	}
	ins := inputFiles(inputs)
	for given := range p.staged {
		fi, err := os.Stat(given)
		if err != nil {
			continue
		}
		for _, in := range ins {
			if os.SameFile(fi, in.info) {
				return Usagef("output %s is the input %s: refusing to overwrite it", given, in.path)
			}
		}
	}
	return nil
}

// settingsInputFiles are the data files and image folders the settings
// name.
func settingsInputFiles(st config.Settings) []string {
	files := dataEntryFiles(st.Data)
	if im := st.Images; im != nil {
		if im.Dir != "" {
			files = append(files, im.Dir)
		}
		if im.Glob != "" {
			if matches, err := filepath.Glob(im.Glob); err == nil {
				files = append(files, matches...)
			}
		}
	}
	return files
}
