// The guard parses every production file: about a second, and twenty
// times that under the race detector, which finds nothing here. CI's
// plain run keeps it.

//go:build !race

package clock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// timeCalls are the time package's functions that start a timer: in
// production code they belong in a Clock (Real's), so that a test or the
// simulation can drive the loop that waits on them.
var timeCalls = []string{"NewTicker", "Tick", "NewTimer", "AfterFunc", "After"}

// allowedTimeCalls is how many such calls each package may still make on
// the time package, and why. Counted per package (not per file), so that
// moving code between a package's files changes nothing.
var allowedTimeCalls = map[string]struct {
	n   int
	why string
}{
	// A request's own wait is its client's time, not a loop's: the fetch
	// long-poll (fetch.go), Metadata's start-up hold and its poll
	// (metadata.go), the share fetch's wait (sharefetch.go), the share
	// group heartbeat's and the share state's retries while a
	// coordinator loads (sharegroupheartbeat.go, sharestate.go).
	"internal/broker": {6, "request-path waits"},
	// Connections: the authentication timeout, a throttled (quota)
	// connection's wait and the per-address hold of a refused connection
	// (tested in synctest bubbles, docs/architecture.md "Tests").
	"internal/wire": {3, "connection timers"},
	// The log's flush.ms timer and the cleaner's I/O throttle
	// (offsetmap.go): not moved yet.
	"internal/storage": {2, "flush.ms timer and the cleaner's I/O throttle (not moved yet)"},
	// Tools and test helpers, not a node's loops.
	"internal/console":   {1, "the lab page's wait for a cancelled run"},
	"internal/failpoint": {1, "a fault test's poll of its file"},
	"internal/testwait":  {1, "how tests wait"},
	"internal/lab":       {8, "the durability lab (a tool)"},
	"internal/verify":    {6, "the loss checker (a tool)"},
	"cmd/holdfast":       {2, "CLI commands' polls"},
}

// TestNoNewWallClockTimers fails when production code starts a timer on
// the time package outside internal/clock beyond allowedTimeCalls: a new
// loop takes its node's Clock (broker.Config.Clock, raft.Config.Clock,
// or the Config.Clock of its package) instead.
func TestNoNewWallClockTimers(t *testing.T) {
	root := filepath.Join("..", "..")
	got := map[string]int{}
	where := map[string][]string{}
	fset := token.NewFileSet()
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			pkg := filepath.ToSlash(filepath.Dir(rel))
			if pkg == "internal/clock" {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			name := "" // the time package's name in this file
			for _, im := range f.Imports {
				if p, _ := strconv.Unquote(im.Path.Value); p == "time" {
					name = "time"
					if im.Name != nil {
						name = im.Name.Name
					}
				}
			}
			if name == "" {
				return nil
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && slices.Contains(timeCalls, sel.Sel.Name) {
					got[pkg]++
					where[pkg] = append(where[pkg], fset.Position(call.Pos()).String())
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for pkg, n := range got {
		if allowed := allowedTimeCalls[pkg].n; n > allowed {
			t.Errorf("%s starts %d timers on the time package, %d allowed: take the node's clock (internal/clock) for a loop, "+
				"or add the call to allowedTimeCalls with its reason if it is a request's or a tool's own wait:\n\t%s",
				pkg, n, allowed, strings.Join(where[pkg], "\n\t"))
		}
	}
	for pkg, a := range allowedTimeCalls {
		if got[pkg] < a.n {
			t.Logf("%s: %d timer calls on the time package, %d allowed (%s): the allowance can come down", pkg, got[pkg], a.n, a.why)
		}
	}
}
