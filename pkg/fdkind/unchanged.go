package fdkind

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// A file the restore opens again by its path must be the file the dump
// saw, or the restore refuses it by name (ErrFileChanged): its size and
// modification time, and, on the machine of the dump (same boot_id),
// its device, inode and change time, which also tells a file rewritten
// and given its old modification time back. A file mapped privately is
// identified by its content too (IdentifyContent): its clean pages are
// read back from it, so a library rebuilt to the same size and time
// would be silent corruption. A file the process had open only for
// writing may have grown since (a log it appends to: what it reads back
// is nothing); shrunk or replaced, it is refused too.

// pseudoFS are the file systems whose files are made up by the kernel
// when read: their sizes and times say nothing about their content.
var pseudoFS = map[int64]bool{
	unix.PROC_SUPER_MAGIC: true, unix.SYSFS_MAGIC: true, unix.CGROUP_SUPER_MAGIC: true,
	unix.CGROUP2_SUPER_MAGIC: true, unix.DEBUGFS_MAGIC: true, unix.TRACEFS_MAGIC: true,
	unix.SECURITYFS_MAGIC: true, unix.BPF_FS_MAGIC: true,
}

// IdentifyContent fills ref.BuildID with the GNU build-id of an ELF file,
// or, for any other file (or an ELF file without one), ref.SHA256 with
// the hash of the ranges of it given (the parts mapped privately: only
// their pages are read back; nil for the whole file), kept in
// ref.Hashed. path is the file or a /proc link to it.
func IdentifyContent(path string, ref *image.FileRef, ranges []image.Extent) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("identify the content of %s: %w", ref.Path, err)
	}
	defer f.Close()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err == nil && pseudoFS[int64(fs.Type)] {
		return nil // made up when read: nothing to compare
	}
	id, sum, err := contentID(f, ranges)
	if err != nil {
		return fmt.Errorf("identify the content of %s: %w", ref.Path, err)
	}
	ref.BuildID, ref.SHA256 = id, sum
	if sum != "" {
		ref.Hashed = ranges
	}
	return nil
}

// contentID returns the build-id of an ELF file, or else the SHA-256 of
// the given ranges of the file back to back (nil: the whole file).
func contentID(f *os.File, ranges []image.Extent) (buildID, sum string, err error) {
	if id := elfBuildID(f); id != "" {
		return id, "", nil
	}
	h := sha256.New()
	if ranges == nil {
		ranges = []image.Extent{{Off: 0, Len: 1 << 62}}
	}
	for _, r := range ranges {
		if _, err := io.Copy(h, io.NewSectionReader(f, r.Off, r.Len)); err != nil {
			return "", "", err
		}
	}
	return "", hex.EncodeToString(h.Sum(nil)), nil
}

// elfBuildID returns the GNU build-id note of an ELF file (hex), or "".
func elfBuildID(r io.ReaderAt) string {
	ef, err := elf.NewFile(r)
	if err != nil {
		return ""
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		align := uint64(4)
		if p.Align == 8 {
			align = 8
		}
		if id := gnuBuildID(b, ef.ByteOrder, align); id != "" {
			return id
		}
	}
	return ""
}

// gnuBuildID finds the NT_GNU_BUILD_ID note among the notes in b.
func gnuBuildID(b []byte, bo binary.ByteOrder, align uint64) string {
	up := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		nameEnd := 12 + up(namesz)
		descEnd := nameEnd + up(descsz)
		if nameEnd > uint64(len(b)) || nameEnd+descsz > uint64(len(b)) {
			return ""
		}
		if typ == ntGNUBuildID && namesz == 4 && string(b[12:16]) == "GNU\x00" && descsz > 0 {
			return hex.EncodeToString(b[nameEnd : nameEnd+descsz])
		}
		if descEnd >= uint64(len(b)) {
			return ""
		}
		b = b[descEnd:]
	}
	return ""
}

// checkUnchanged refuses a regular file, just opened again as f with
// flags, that is not the one the dump saw (see above). mapped is set for
// the file behind mappings, whose content is compared as well when the
// dump identified it.
func checkUnchanged(env RestoreEnv, ref *image.FileRef, f *os.File, flags int, mapped bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: fstat: %w", ref.Path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err == nil && pseudoFS[int64(fs.Type)] {
		return nil
	}
	changed := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", ref.Path, fmt.Sprintf(format, args...), ErrFileChanged)
	}
	same := env.SameBoot()
	if same && (st.Dev != ref.Dev || st.Ino != ref.Ino) {
		return changed("is another file than at the dump (device %#x inode %d, was device %#x inode %d: replaced)", st.Dev, st.Ino, ref.Dev, ref.Ino)
	}
	if !mapped && flags&unix.O_ACCMODE == unix.O_WRONLY {
		if st.Size < ref.Size {
			return changed("was %d bytes at the dump, now %d (truncated)", ref.Size, st.Size)
		}
		return nil
	}
	mtime := st.Mtim.Sec*1e9 + st.Mtim.Nsec
	if st.Size != ref.Size || mtime != ref.MtimeNs {
		return changed("was %d bytes modified at %s, now %d bytes modified at %s (rewritten since the dump)",
			ref.Size, stamp(ref.MtimeNs), st.Size, stamp(mtime))
	}
	if ctime := st.Ctim.Sec*1e9 + st.Ctim.Nsec; same && ref.CtimeNs != 0 && ctime != ref.CtimeNs {
		return changed("its inode changed at %s, after the dump (%s): rewritten and given its old modification time back, or its owner, mode or links changed",
			stamp(ctime), stamp(ref.CtimeNs))
	}
	if !mapped || (ref.BuildID == "" && ref.SHA256 == "") {
		return nil
	}
	id, sum, err := contentID(f, ref.Hashed)
	if err != nil {
		return fmt.Errorf("%s: identify its content: %w", ref.Path, err)
	}
	switch {
	case ref.BuildID != "" && id != ref.BuildID:
		return changed("ELF build-id %s, was %s at the dump (another build of it)", orNone(id), ref.BuildID)
	case ref.SHA256 != "" && sum != ref.SHA256:
		return changed("content hash (SHA-256) %s, was %s at the dump (same size and time, other content)", orNone(sum), ref.SHA256)
	}
	return nil
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.000000000") }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ntGNUBuildID is the type of the GNU build-id note (NT_GNU_BUILD_ID).
const ntGNUBuildID = 3

// checkSameDir refuses, on the machine of the dump, a directory opened
// again by its path that is another directory than the one the process
// had open (removed and made again, or another one moved there): its
// entries would not be the ones the process may have read. Elsewhere
// nothing tells.
func checkSameDir(env RestoreEnv, ref *image.FileRef, f *os.File) error {
	if !env.SameBoot() {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: fstat: %w", ref.Path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err == nil && pseudoFS[int64(fs.Type)] {
		return nil
	}
	if st.Dev != ref.Dev || st.Ino != ref.Ino {
		return fmt.Errorf("%s: is another directory than at the dump (device %#x inode %d, was device %#x inode %d: made again or replaced): %w",
			ref.Path, st.Dev, st.Ino, ref.Dev, ref.Ino, ErrFileChanged)
	}
	return nil
}
