package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestOSFSBudget: an OSFSBudget filesystem opens files up to its budget,
// refuses the next with ErrOpenFileBudget (nothing opened, no descriptor
// used), and a Close - once, however often it is called - frees a place;
// a failed open takes none.
func TestOSFSBudget(t *testing.T) {
	dir := t.TempDir()
	fsys := OSFSBudget(false, 3)
	var open []File
	for i := range 3 {
		f, err := fsys.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatalf("open %d within the budget: %v", i, err)
		}
		open = append(open, f)
	}
	if _, err := fsys.OpenFile(filepath.Join(dir, "x"), os.O_RDWR|os.O_CREATE, 0o644); !errors.Is(err, ErrOpenFileBudget) {
		t.Fatalf("open past the budget: %v, want ErrOpenFileBudget", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused open created the file: %v", err)
	}
	open[0].Close()
	open[0].Close() // a second Close gives nothing back twice
	if n, max, ok := OpenFiles(fsys); !ok || n != 2 || max != 3 {
		t.Fatalf("OpenFiles = %d, %d, %v; want 2, 3, true", n, max, ok)
	}
	if _, err := fsys.OpenFile(filepath.Join(dir, "missing", "y"), os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
	f, err := fsys.OpenFile(filepath.Join(dir, "x"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("open after a Close: %v", err)
	}
	f.Close()
	if _, _, ok := OpenFiles(OSFS()); ok {
		t.Fatal("OSFS reports a budget")
	}
	if !IsOS(fsys) {
		t.Fatal("an OSFSBudget filesystem is not the OS's (the data directory lock needs it)")
	}
}
