//go:build !linux

package tiered

import "time"

// setUserTimeout: no TCP_USER_TIMEOUT here; the dial and response-header
// timeouts still hold.
func setUserTimeout(uintptr, time.Duration) error { return nil }
