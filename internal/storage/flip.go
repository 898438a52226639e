package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"holdfast/internal/records"
)

// FlipSealedBatch damages a partition log on disk as a bit rot or a bad
// sector would, for fault tests and the durability lab: it inverts 64
// bytes inside the records of the middle batch of the first segment in dir
// (sealed: a later one exists), past the batch header so the framing
// holds and only the CRC can tell. It returns the file and the first
// byte flipped; a batch that fails its CRC already is left as it is.
func FlipSealedBatch(dir string) (path string, at int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", 0, err
	}
	var logs []string
	for _, en := range ents {
		if filepath.Ext(en.Name()) == ".log" {
			logs = append(logs, en.Name())
		}
	}
	slices.Sort(logs)
	if len(logs) < 2 {
		return "", 0, fmt.Errorf("%s: %d segments, none sealed (more records needed)", dir, len(logs))
	}
	path = filepath.Join(dir, logs[0])
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	const flip = 64
	var big, size []int // batches with room for the flip past their header
	for rest := b; len(rest) > 0; {
		batch, next, err := records.Next(rest)
		if err != nil {
			return "", 0, fmt.Errorf("%s: %w", path, err)
		}
		if len(batch) >= records.HeaderSize+flip {
			big, size = append(big, len(b)-len(rest)), append(size, len(batch))
		}
		rest = next
	}
	if len(big) == 0 {
		return "", 0, fmt.Errorf("%s: no batch of %d bytes or more", path, records.HeaderSize+flip)
	}
	mid := len(big) / 2
	at = big[mid] + records.HeaderSize
	if _, err := records.Validate(b[big[mid]:big[mid]+size[mid]], 0); err != nil {
		return path, at, nil // damaged already: flipping again would mend it
	}
	for i := at; i < at+flip; i++ {
		b[i] ^= 0xff
	}
	return path, at, os.WriteFile(path, b, 0o644)
}
