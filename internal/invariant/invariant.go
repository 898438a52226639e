// Package invariant holds cheap assertions of what must always hold,
// compiled in only with the invariants build tag:
//
//	go test -race -tags invariants ./internal/...
//
// Call sites guard each check with the constant Enabled, so a build
// without the tag compiles them out whole (arguments included):
//
//	if invariant.Enabled {
//		invariant.Check(hw <= end, "partition %s: high watermark %d past log end %d", name, hw, end)
//	}
//
// A failed check panics: in a test run the panic names the broken rule at
// the moment it breaks, not later as a lost or duplicated record. Checks
// are for what the code itself guarantees (a bug if false), never for
// input, the disk or the network, which get errors.
package invariant

import "fmt"

// Violation is the panic value of a failed check.
type Violation struct{ Msg string }

func (v Violation) Error() string { return "invariant violated: " + v.Msg }

func fail(format string, args ...any) {
	panic(Violation{fmt.Sprintf(format, args...)})
}
