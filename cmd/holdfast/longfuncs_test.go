package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a production function may span (from
// func to its closing brace). A longer one does several jobs; split it
// into named steps, each with one.
const maxFuncLines = 150

// longFuncsAllowed lists the production functions still over
// maxFuncLines, by "path name" (name as Recv.Func), with their length
// when listed. The list only shrinks: a listed function may not grow,
// and one split below the limit must leave the list.
var longFuncsAllowed = map[string]int{}

// TestNoLongFunctions: no function in cmd or internal (tests and
// third_party aside) spans more than maxFuncLines lines, except those in
// longFuncsAllowed, which may not grow.
func TestNoLongFunctions(t *testing.T) {
	root := filepath.Join("..", "..")
	found := map[string]int{}
	fset := token.NewFileSet()
	funcs := 0
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				funcs++
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					found[filepath.ToSlash(rel)+" "+funcName(fd)] = n
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if funcs < 1000 {
		t.Fatalf("only %d functions found: the walk is off", funcs)
	}
	for name, n := range found {
		switch was, ok := longFuncsAllowed[name]; {
		case !ok:
			t.Errorf("%s spans %d lines (at most %d): split it into named steps", name, n, maxFuncLines)
		case n > was:
			t.Errorf("%s grew from %d to %d lines (at most %d for new code): split it rather", name, was, n, maxFuncLines)
		}
	}
	for name := range longFuncsAllowed {
		if _, ok := found[name]; !ok {
			t.Errorf("%s is no longer over %d lines (or is gone): take it off longFuncsAllowed", name, maxFuncLines)
		}
	}
}

// funcName is fd's name, with its receiver's type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fmt.Sprintf("%T.%s", t, fd.Name.Name)
}
