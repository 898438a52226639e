package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameRealFiles: every .go path the docs and the README name
// exists, so a moved file cannot leave a reader looking in the wrong place.
// A path is whole (internal/raft/host.go) or relative to an internal
// package (raft/host.go).
func TestDocsNameRealFiles(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	whole := regexp.MustCompile(`(?:^|[^\w/.-])((?:cmd|internal|scripts|third_party)/[\w./-]+\.go)\b`)
	relative := regexp.MustCompile(`(?:^|[^\w/.-])([a-z][a-z0-9_]*/\w+\.go)\b`)
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			var paths []string
			for _, m := range whole.FindAllStringSubmatch(line, -1) {
				paths = append(paths, m[1])
			}
			for _, m := range relative.FindAllStringSubmatch(line, -1) {
				pkg := strings.SplitN(m[1], "/", 2)[0]
				if fi, err := os.Stat(filepath.Join(root, "internal", pkg)); err == nil && fi.IsDir() {
					paths = append(paths, "internal/"+m[1])
				}
			}
			for _, p := range paths {
				checked++
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", filepath.Base(doc), n+1, p)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d paths found in the docs: the patterns are off", checked)
	}
	t.Logf("%d paths checked", checked)
}
