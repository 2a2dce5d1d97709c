package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCreateDirFile covers what an image directory refuses and cleans up:
// an existing image is never overwritten, a directory another dump writes
// into is refused, a stale partial image is removed (and said so), and an
// aborted write removes the directories it created, only those.
func TestCreateDirFile(t *testing.T) {
	tests := []struct {
		name      string
		dir       string            // image directory, under a fresh root
		files     map[string]string // made under root before
		wantErr   error
		wantStale bool
		afterFail []string // paths under root that must be gone after Abort
		afterKeep []string // paths under root that must stay after Abort
	}{
		{name: "new", dir: "img", afterFail: []string{"img"}},
		{name: "nested", dir: "a/b/img", afterFail: []string{"a"}},
		{name: "parent exists", dir: "a/img", files: map[string]string{"a/x": ""}, afterFail: []string{"a/img"}, afterKeep: []string{"a/x"}},
		{name: "exists empty", dir: "img", files: map[string]string{"img/": ""}, afterKeep: []string{"img"}},
		{name: "image", dir: "img", files: map[string]string{"img/" + FileName: "old"}, wantErr: ErrImageExists},
		{name: "image and stale partial", dir: "img", files: map[string]string{"img/" + FileName: "old", "img/" + partialName: "x"}, wantErr: ErrImageExists},
		{name: "stale partial", dir: "img", files: map[string]string{"img/" + partialName: "half"}, wantStale: true, afterKeep: []string{"img"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if name[len(name)-1] == '/' {
					if err := os.MkdirAll(p, 0o700); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(root, tc.dir)
			d, err := CreateDirFile(dir)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("CreateDirFile: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				for name, content := range tc.files {
					if b, rerr := os.ReadFile(filepath.Join(root, name)); name[len(name)-1] != '/' && (rerr != nil || string(b) != content) {
						t.Errorf("after the refusal, %s: %q, %v; want %q as before", name, b, rerr, content)
					}
				}
				return
			}
			if d.StaleRemoved != tc.wantStale {
				t.Errorf("StaleRemoved %v, want %v", d.StaleRemoved, tc.wantStale)
			}
			if st, err := os.Stat(filepath.Join(dir, partialName)); err != nil || st.Size() != 0 {
				t.Errorf("partial image: %v, %v; want an empty file", st, err)
			}
			// While it is written, nobody else can write into dir.
			if _, err := CreateDirFile(dir); !errors.Is(err, ErrBusy) {
				t.Errorf("a second CreateDirFile while the first writes: %v, want ErrBusy", err)
			}
			d.Abort()
			for _, p := range tc.afterFail {
				if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
					t.Errorf("after Abort, %s exists", p)
				}
			}
			for _, p := range tc.afterKeep {
				if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
					t.Errorf("after Abort, %s: %v; want it kept", p, err)
				}
			}
		})
	}
}

// TestDirCommitAndOpen: a committed image opens; a directory with only a
// partial image says the dump did not finish; a directory with nothing
// says there is no image.
func TestDirCommitAndOpen(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "img")
	d, err := CreateDirFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(dir); !errors.Is(err, ErrIncomplete) {
		t.Errorf("OpenDir while the image is written: %v, want ErrIncomplete", err)
	}
	if _, err := d.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	f, err := OpenDir(dir)
	if err != nil {
		t.Fatalf("OpenDir after Commit: %v", err)
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(dir, partialName)); err == nil {
		t.Errorf("the partial image is still there after Commit")
	}
	if _, err := CreateDirFile(dir); !errors.Is(err, ErrImageExists) {
		t.Errorf("CreateDirFile on a committed image: %v, want ErrImageExists", err)
	}
	empty := filepath.Join(root, "empty")
	os.Mkdir(empty, 0o700)
	if _, err := OpenDir(empty); !errors.Is(err, ErrNoImage) {
		t.Errorf("OpenDir on an empty directory: %v, want ErrNoImage", err)
	}
}
