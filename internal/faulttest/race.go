//go:build race

package faulttest

// Under go test -race the nodes' binary is built with the race detector
// too: the fault tests' brokers run as child processes, so without it
// -race would check only the test's own goroutines.
func init() { buildFlags = append(buildFlags, "-race") }
