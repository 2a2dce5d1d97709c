package fdkind

import (
	"fmt"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
)

// DescribeDirs describes the working and root directories of a frozen
// process: the working directory's path, and its description if it was
// removed (made again at restore, like a deleted directory held open);
// the root directory's path (chroot), which the restore enters again. A
// root directory that was removed or moved is refused.
func DescribeDirs(pid int) (cwd string, deleted *image.FileRef, root string, err error) {
	lf, err := proc.ReadLinkedFile(proc.Path(pid, "cwd"))
	if err != nil {
		return "", nil, "", fmt.Errorf("working directory: %w", err)
	}
	ref, err := DirRef(lf)
	if err != nil {
		return "", nil, "", fmt.Errorf("working directory: %w", err)
	}
	if ref.Deleted {
		deleted = &ref
	}
	rl, err := proc.ReadLinkedFile(proc.Path(pid, "root"))
	if err != nil {
		return "", nil, "", fmt.Errorf("root directory: %w", err)
	}
	if rl.Unlinked {
		return "", nil, "", fmt.Errorf("root directory (chroot) %s was removed or moved: cannot be restored: %w", rl.Path, ErrUnsupported)
	}
	return lf.Path, deleted, rl.Path, nil
}
