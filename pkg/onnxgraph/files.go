package onnxgraph

import (
	"fmt"
	"io"
	"os"
)

// ReadRegularFile reads a whole file that must be a regular file of at most
// limit bytes. Devices, FIFOs and directories are refused before anything is
// read (reading /dev/zero would never end), and a file that grows past limit
// while it is read is refused too.
func ReadRegularFile(path string, limit int64) ([]byte, error) {
	f, fi, err := openRegularFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d", path, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s grew past the limit of %d bytes while it was read", path, limit)
	}
	return b, nil
}

// openRegularFile opens path, which must be a regular file before and
// after it is opened (it may have been swapped in between).
func openRegularFile(path string) (*os.File, os.FileInfo, error) {
	// Stat before opening: opening a FIFO blocks until a writer comes.
	if err := CheckRegularFile(path); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%s)", path, DescribeFileMode(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// CheckRegularFile returns an error naming path unless it is (or links to)
// a regular file.
func CheckRegularFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, DescribeFileMode(fi.Mode()))
	}
	return nil
}

// DescribeFileMode names the kind of a file that is not a regular one
// ("a named pipe", "a character device", …), for messages that refuse it.
func DescribeFileMode(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "mode " + m.String()
}
