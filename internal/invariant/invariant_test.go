package invariant

import (
	"errors"
	"testing"
)

// With the tag a false check panics with a Violation naming it, and a true
// one does nothing; without it, neither does anything (CI runs both).
func TestCheck(t *testing.T) {
	Check(true, "never")
	defer func() {
		r := recover()
		if !Enabled {
			if r != nil {
				t.Fatalf("without the invariants tag a check panicked: %v", r)
			}
			return
		}
		var v Violation
		if err, ok := r.(error); !ok || !errors.As(err, &v) || v.Msg != "x 1 > 0" {
			t.Fatalf("with the invariants tag: recovered %v, want a Violation \"x 1 > 0\"", r)
		}
	}()
	Check(false, "x %d > %d", 1, 0)
}
