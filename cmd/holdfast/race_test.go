//go:build race

package main

// Under go test -race the child processes these tests start are built
// with the race detector too: most of the broker's concurrency runs in
// them, not in the test binary.
func init() { buildFlags = append(buildFlags, "-race") }
