//go:build invariants

package invariant

// Enabled: this build checks invariants (the invariants tag).
const Enabled = true

// Check panics with a Violation when cond is false.
func Check(cond bool, format string, args ...any) {
	if !cond {
		fail(format, args...)
	}
}
