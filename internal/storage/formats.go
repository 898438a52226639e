package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
)

// ErrUnknownFormat: a file carries a format version this binary does not
// know, so a newer Holdfast wrote it. It is never taken for damage (which
// would cut, rebuild or discard the file): the open fails and the file is
// left as it is, for the binary that wrote it. docs/storage.md lists every
// file and its versions.
var ErrUnknownFormat = errors.New("format version unknown to this binary")

// FormatError names the file, the version found in it and the versions
// this binary reads. It matches ErrUnknownFormat (errors.Is).
type FormatError struct {
	Path  string
	What  string // "format version" if empty; "record kind" for a journal
	Found string // as written in the file
	Known []int
}

func (e *FormatError) Error() string {
	what := e.What
	if what == "" {
		what = "format version"
	}
	return fmt.Sprintf("%s: %s %s, this binary reads %s: %v (written by a newer Holdfast?); "+
		"the file was left untouched: run a Holdfast release that reads it",
		e.Path, what, e.Found, knownList(what, e.Known), ErrUnknownFormat)
}

func (e *FormatError) Is(target error) bool { return target == ErrUnknownFormat }

func knownList(what string, v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	noun := "version"
	if what != "format version" {
		noun = what
	}
	if len(s) == 1 {
		return noun + " " + s[0]
	}
	return noun + "s " + fmt.Sprint(s)
}

// CheckVersion returns a *FormatError when found is a version number
// above every known one. Anything else (a known version, or text that is
// not a number: damage, for the file's parser to report) passes.
func CheckVersion(path string, found int64, known ...int) error {
	if found <= int64(slices.Max(known)) {
		return nil
	}
	return &FormatError{Path: path, Found: strconv.FormatInt(found, 10), Known: known}
}

// checkVersionLine applies CheckVersion to a checkpoint's first line, its
// version ("0\n...").
func checkVersionLine(path string, b []byte, known ...int) error {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	v, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		return nil
	}
	return CheckVersion(path, v, known...)
}

// readHead reads up to n bytes from the start of a file.
func readHead(fsys FS, name string, n int) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:k], nil
}
