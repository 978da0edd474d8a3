// Package rotated reads a file that is replaced while the process runs:
// a certificate bundle, a password or a token in a Kubernetes Secret
// mounted as a volume, which is updated in place when it is rotated. Each
// Read reads the file again, and parses it when it changed; a file that
// cannot be read or parsed at that moment (half-written, removed) leaves
// the last good value in use. The first failure of a run is logged, and
// its end; every failed Read is counted (Failures).
package rotated

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// File is a file and the value last parsed from it. Its methods are safe
// for concurrent use.
type File[T any] struct {
	path, what string
	parse      func([]byte) (T, error)
	log        *slog.Logger // nil: none

	mu  sync.Mutex
	raw []byte // as last parsed
	val T
	err error // of the last reading, when it left val as it was

	failures atomic.Uint64 // Reads that failed
}

// Open reads path, which holds what (named in errors and log lines, such
// as "redis password_file"), and parses it with parse. A file that cannot
// be read or parsed now is Open's error; later failures go to log.
func Open[T any](path, what string, parse func([]byte) (T, error), log *slog.Logger) (*File[T], error) {
	f := &File[T]{path: path, what: what, parse: parse}
	if _, err := f.Read(); err != nil {
		return nil, err
	}
	f.log = log
	return f, nil
}

// Read reads the file again and returns its value: the last good one,
// with the error that kept it, when the file cannot be read or parsed.
func (f *File[T]) Read() (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.err
	raw, err := os.ReadFile(f.path)
	switch {
	case err != nil:
		f.err = fmt.Errorf("%s: %w", f.what, err)
	case f.raw != nil && bytes.Equal(raw, f.raw):
		f.err = nil
	default:
		v, err := f.parse(raw)
		if err != nil {
			f.err = fmt.Errorf("%s %s: %w", f.what, f.path, err)
			break
		}
		f.raw, f.val, f.err = raw, v, nil
	}
	if f.err != nil {
		f.failures.Add(1)
	}
	switch {
	case f.log == nil:
	case f.err != nil && was == nil:
		f.log.Warn(f.what+" could not be read again: the last good one stays in use", "error", f.err)
	case f.err == nil && was != nil:
		f.log.Info(f.what+" read again", "file", f.path)
	}
	return f.val, f.err
}

// Failures returns how many Reads failed since Open: each left the last
// good value in use.
func (f *File[T]) Failures() uint64 { return f.failures.Load() }

// Counted is a File of any value, for counting its failures.
type Counted interface{ Failures() uint64 }

// Last returns the last good value, without reading the file.
func (f *File[T]) Last() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.val
}

// Text parses a file that holds one line of text (a password, a token):
// its contents less surrounding white space, which must leave some.
func Text(raw []byte) (string, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" {
		return "", fmt.Errorf("the file is empty")
	}
	return s, nil
}
