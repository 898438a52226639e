package faulttest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	CleanupBinary()
	os.Exit(code)
}
