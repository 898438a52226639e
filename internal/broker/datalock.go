package broker

import "holdfast/internal/storage"

// The data directory is locked for the broker's lifetime (flock on
// <data-dir>/.lock, as Kafka does): two processes writing one log corrupt
// it, so a second one refuses to start and names the holder. First of all
// start-up steps, before anything under the directory is read.

func (b *Broker) lockDataDir() error {
	if !storage.IsOS(b.cfg.FS) {
		return nil // a test filesystem: nothing another process could share
	}
	l, err := storage.LockDir(b.cfg.DataDir)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, l.Unlock)
	return nil
}
