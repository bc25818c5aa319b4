// Package atomicfile writes files so that a crash or an error leaves
// either the old file or the whole new one, never half of one: the bytes
// go to a temporary file in the same directory, which is synced, then
// renamed over the path, and the directory is synced.
//
// The new file gets the permissions os.Create gives (0666 less the
// process's umask: 0644 under the usual umask 022), as torch.save's files
// do, not the owner-only 0600 of os.CreateTemp: checkpoints are shared
// with the people and jobs that load them.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// Write writes path with what write writes, atomically (see the package
// comment). When write or any step after it fails, path is untouched and
// the temporary file removed; the error names path.
func Write(path string, write func(io.Writer) error) (err error) {
	f, err := create(path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := write(w); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err // names both paths
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // the rename reaches the disk; some file systems cannot sync a directory
		d.Close()
	}
	return nil
}

// create makes a new temporary file beside path, named after it, with
// os.Create's permissions.
func create(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp"+strconv.FormatUint(rand.Uint64()%1e9, 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err // names the temporary file, in path's directory
		}
		return f, nil
	}
	return nil, fmt.Errorf("creating a temporary file beside %s: every name tried exists", path)
}
