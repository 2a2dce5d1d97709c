package proc

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// LinkedFile is the file behind a /proc magic link (fd/N, map_files/A-B).
type LinkedFile struct {
	// Stat is the file's own (through the link, not by name).
	Stat syscall.Stat_t
	// Path is the link text, without the " (deleted)" the kernel appends
	// when the file is Unlinked.
	Path string
	// Unlinked means Path does not lead to this file any more: it was
	// deleted (or renamed over, or is a memfd), so only the link reaches
	// its content.
	Unlinked bool
}

// ReadLinkedFile says which file a magic link leads to. The link text
// alone cannot tell: a name may itself end in " (deleted)", and a deleted
// file's name may have been reused. So the file is stat'ed through the
// link, and its name counts only if stat'ing that name finds the same
// inode on the same device.
func ReadLinkedFile(link string) (LinkedFile, error) {
	var lf LinkedFile
	if err := syscall.Stat(link, &lf.Stat); err != nil {
		return lf, fmt.Errorf("stat %s: %w", link, err)
	}
	text, err := os.Readlink(link)
	if err != nil {
		return lf, err
	}
	lf.Path = text
	var byName syscall.Stat_t
	if syscall.Stat(text, &byName) == nil && byName.Dev == lf.Stat.Dev && byName.Ino == lf.Stat.Ino {
		return lf, nil
	}
	lf.Unlinked = true
	lf.Path = strings.TrimSuffix(text, " (deleted)")
	return lf, nil
}
