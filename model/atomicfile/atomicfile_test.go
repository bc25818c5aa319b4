package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		old     string // the file before; "" for none
		write   func(io.Writer) error
		want    string // the file after
		wantErr error
	}{
		{"new file", "", writeString("new"), "new", nil},
		{"replaces", "old", writeString("new"), "new", nil},
		{"larger than the buffer", "", writeString(strings.Repeat("0123456789abcdef", 3<<16)), strings.Repeat("0123456789abcdef", 3<<16), nil},
		{"failure keeps the old file", "old", func(w io.Writer) error {
			io.WriteString(w, "half")
			return boom
		}, "old", boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "model.safetensors")
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := Write(path, tc.write)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Write: %v, want %v", err, tc.wantErr)
			}
			got, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if string(got) != tc.want {
				t.Errorf("file holds %d bytes %.8q, want %d bytes %.8q", len(got), got, len(tc.want), tc.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(entries))
			}
			if err != nil && !errorNames(err, path) {
				t.Errorf("error %q does not name %s", err, path)
			}
		})
	}
}

// TestWriteModeFollowsUmask: the file gets os.Create's permissions, 0666
// less the umask, not os.CreateTemp's 0600.
func TestWriteModeFollowsUmask(t *testing.T) {
	for _, tc := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o077, 0o600}, {0o002, 0o664}} {
		old := syscall.Umask(tc.umask)
		path := filepath.Join(t.TempDir(), "w")
		err := Write(path, writeString("x"))
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tc.want {
			t.Errorf("umask %#o: mode %v, want %v", tc.umask, st.Mode().Perm(), tc.want)
		}
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "w")
	err := Write(path, writeString("x"))
	if !errors.Is(err, os.ErrNotExist) || !errorNames(err, filepath.Dir(path)) {
		t.Fatalf("Write into a missing directory: %v, want a not-exist error naming the directory", err)
	}
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

func errorNames(err error, path string) bool {
	return err != nil && strings.Contains(err.Error(), path)
}
