//go:build !invariants

package invariant

// Enabled: this build checks invariants (the invariants tag).
const Enabled = false

// Check does nothing without the invariants tag; call sites guard it with
// Enabled so that not even its arguments are computed.
func Check(cond bool, format string, args ...any) {}

var _ = fail // used with the tag
