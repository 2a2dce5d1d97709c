package fdkind

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// maxWDGap bounds how many watch descriptors the restore skips to give a
// watch its old number back.
const maxWDGap = 1 << 16

// inotify is an inotify instance with its watches, each with its watch
// descriptor (programs key their state by it), mask and file (found from
// the file handle in fdinfo). Events queued and not read yet cannot be
// put back: such an instance is refused, as is a watch whose file is gone.
//
// At restore the watch descriptors come back with the same numbers: the
// kernel hands them out in increasing order, so a gap is skipped by
// adding and removing a watch on a scratch file, and the IN_IGNORED events
// this queues are read off before the instance is handed over.
func inotify() Kind {
	return Kind{
		Name:     image.FileInotify,
		Match:    anon("inotify"),
		Describe: describeInotify,
		Finish:   linkDeletedWatches,
		Open:     openInotify,
		Show:     showInotify,
	}
}

func showInotify(f *image.File) string {
	var ws []string
	for _, w := range event(f).Watches {
		ws = append(ws, fmt.Sprintf("wd %d %s mask %#x", w.WD, w.Path, w.Mask))
	}
	return fmt.Sprintf("%d watches: %s", len(ws), strings.Join(ws, "; "))
}

func describeInotify(env DumpEnv, s *Source, f *image.File) error {
	if s.Copy >= 0 {
		n, err := unix.IoctlGetInt(s.Copy, unix.TIOCINQ) // FIONREAD
		if err != nil {
			return fmt.Errorf("inotify: FIONREAD: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("inotify instance with %d bytes of events not read yet: cannot be restored: %w", n, ErrUnsupported)
		}
	}
	f.Event = &image.EventFile{}
	var mounts []*proc.MountInfo
	for _, line := range s.Info.Lines {
		v, ok := strings.CutPrefix(line, "inotify ")
		if !ok {
			continue
		}
		w, handle, err := parseInotifyLine(v)
		if err != nil {
			return err
		}
		if mounts == nil {
			if mounts, err = proc.ReadMountInfo(sys.Getpid()); err != nil {
				return fmt.Errorf("inotify: %w", err)
			}
		}
		if w.Path, err = handlePath(mounts, w.Dev, handle); errors.Is(err, errWatchedDeleted) {
			// restored if an fd of the dump holds it (linkDeletedWatches)
			w.Ghost = &image.FileRef{}
			f.Event.Watches = append(f.Event.Watches, w)
			continue
		}
		if err != nil {
			return fmt.Errorf("inotify watch %d (inode %d): the watched file cannot be found (%v): cannot be restored: %w", w.WD, w.Ino, err, ErrUnsupported)
		}
		var st unix.Stat_t
		if err := unix.Stat(w.Path, &st); err != nil || st.Ino != w.Ino || st.Dev != w.Dev {
			return fmt.Errorf("inotify watch %d: the watched file %s is no longer reachable by its name: cannot be restored: %w", w.WD, w.Path, ErrUnsupported)
		}
		f.Event.Watches = append(f.Event.Watches, w)
	}
	sort.Slice(f.Event.Watches, func(i, j int) bool { return f.Event.Watches[i].WD < f.Event.Watches[j].WD })
	return nil
}

// parseInotifyLine parses the part of an fdinfo line after "inotify ":
// "wd:3 ino:60948 sdev:fe00000 mask:80000200 ignored_mask:0
// fhandle-bytes:8 fhandle-type:1 f_handle:4809060000000000" (hex).
func parseInotifyLine(v string) (image.InotifyWatch, unix.FileHandle, error) {
	var w image.InotifyWatch
	kv := map[string]string{}
	for _, f := range strings.Fields(v) {
		if k, val, ok := strings.Cut(f, ":"); ok {
			kv[k] = val
		}
	}
	num := func(k string, bits int) (uint64, error) {
		n, err := strconv.ParseUint(kv[k], 16, bits)
		if err != nil {
			return 0, fmt.Errorf("inotify line %q: %s: %w", v, k, err)
		}
		return n, nil
	}
	wd, err := num("wd", 31)
	if err != nil {
		return w, unix.FileHandle{}, err
	}
	w.WD = int(wd)
	if w.Ino, err = num("ino", 64); err != nil {
		return w, unix.FileHandle{}, err
	}
	sdev, err := num("sdev", 32)
	if err != nil {
		return w, unix.FileHandle{}, err
	}
	// The kernel's dev_t: major in the top 12 bits of 32, minor below.
	w.Dev = unix.Mkdev(uint32(sdev>>20), uint32(sdev&0xfffff))
	mask, err := num("mask", 32)
	if err != nil {
		return w, unix.FileHandle{}, err
	}
	w.Mask = uint32(mask)
	typ, err := num("fhandle-type", 31)
	if err != nil {
		return w, unix.FileHandle{}, err
	}
	b, err := hex.DecodeString(kv["f_handle"])
	if err != nil || len(b) == 0 {
		return w, unix.FileHandle{}, fmt.Errorf("inotify line %q: no file handle", v)
	}
	return w, unix.NewFileHandle(int32(typ), b), nil
}

// errWatchedDeleted means a watched file has no name any more.
var errWatchedDeleted = errors.New("deleted")

// linkDeletedWatches gives each watch of a deleted file the deleted file
// an fd of the dump holds (by device and inode): the restore makes it
// again once for both, and watches it. A deleted file no fd holds is
// refused.
func linkDeletedWatches(env DumpEnv, fds []Held) error {
	for _, h := range fds {
		f := h.File
		if f.Kind != image.FileInotify || f.Event == nil {
			continue
		}
		for i := range f.Event.Watches {
			w := &f.Event.Watches[i]
			if w.Ghost == nil || w.Ghost.DataID != 0 {
				continue
			}
			found := false
			for _, o := range fds {
				r := &o.File.Ref
				if o.File.Kind == image.FileRegular && r.Deleted && r.Dev == w.Dev && r.Ino == w.Ino {
					ref := *r
					w.Ghost, w.Path, found = &ref, r.Path, true
					break
				}
			}
			if !found {
				return fmt.Errorf("process %d fd %d (inotify): watch %d (inode %d): the watched file was deleted and no fd of the dump holds it: cannot be restored: %w",
					h.PID, h.FD, w.WD, w.Ino, ErrUnsupported)
			}
		}
	}
	return nil
}

// handlePath finds the path of the file a handle names on the file
// system of device dev, through a mount of it.
func handlePath(mounts []*proc.MountInfo, dev uint64, h unix.FileHandle) (string, error) {
	want := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	var lastErr error = errors.New("no mount of its file system")
	for _, m := range mounts {
		if m.MajorMinorVer != want {
			continue
		}
		mnt, err := sys.Open(m.MountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			lastErr = err
			continue
		}
		fd, err := sys.OpenByHandleAt(mnt, h, unix.O_PATH|unix.O_CLOEXEC)
		mnt.Close()
		if err != nil {
			lastErr = err
			continue
		}
		// The name counts only if it still leads to the same inode (not
		// from the link text, whose " (deleted)" a file name can end with).
		lf, err := proc.ReadLinkedFile(fmt.Sprintf("/proc/self/fd/%d", fd.Int()))
		fd.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if lf.Unlinked {
			return lf.Path, errWatchedDeleted
		}
		return lf.Path, nil
	}
	return "", lastErr
}

func openInotify(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return Desc{}, fmt.Errorf("inotify_init1: %w", err)
	}
	of := os.NewFile(uintptr(fd), "inotify")
	// deleted watched files are made again before any watch is added:
	// making them must not show as events
	ghosts := map[int]string{}
	for _, w := range event(f).Watches {
		if w.Ghost == nil {
			continue
		}
		g, err := openGhost(env, w.Ghost, unix.O_PATH, false)
		if err != nil {
			of.Close()
			return Desc{}, fmt.Errorf("inotify watch %d on the deleted %s: %w", w.WD, w.Path, err)
		}
		env.Keep(g)
		ghosts[w.WD] = fmt.Sprintf("/proc/self/fd/%d", g.Fd())
	}
	// The watches are added once every file of the tree is open: making
	// deleted files, directories and FIFOs again (created and removed at
	// their old names) would otherwise show as events.
	watches, same := event(f).Watches, env.SameBoot()
	lastBeforeBuild(env, func() error { return addWatches(of, watches, ghosts, same) })
	env.Keep(of)
	d, err := dupFile(of)
	if err != nil {
		return Desc{}, err
	}
	return Desc{File: d}, nil
}

// lastBeforeBuild runs fn once every file of the tree is open, after the
// steps the other kinds asked for then (a step that asks for a step puts
// it after every step asked before it).
func lastBeforeBuild(env RestoreEnv, fn func() error) {
	afterSteps(env, 3, fn)
}

// afterSteps runs fn as a BeforeBuild step asked for by depth nested
// steps: after the steps asked for with a smaller depth. Depth 1: with
// the steps the kinds ask for as they open files (which may still open
// files, env.File); 2: FIFO holders closed; 3: inotify watches and
// fanotify marks added (lastBeforeBuild).
func afterSteps(env RestoreEnv, depth int, fn func() error) {
	if depth <= 1 {
		env.BeforeBuild(func(func(sys.PID) (Target, bool)) error { return fn() })
		return
	}
	env.BeforeBuild(func(func(sys.PID) (Target, bool)) error {
		afterSteps(env, depth-1, fn)
		return nil
	})
}

// addWatches adds the watches with their old watch descriptors, then
// reads off the events the skipping queued. On the machine of the dump
// (sameBoot) each watched path must still lead to the same inode.
func addWatches(of *os.File, watches []image.InotifyWatch, ghosts map[int]string, sameBoot bool) error {
	fd := int(of.Fd())
	next := 1 // the watch descriptor the kernel gives next
	var scratch string
	defer func() {
		if scratch != "" {
			os.Remove(scratch)
		}
	}()
	for _, w := range watches {
		if w.WD < next || w.WD-next > maxWDGap {
			return fmt.Errorf("inotify watch descriptor %d cannot be given again (next is %d)", w.WD, next)
		}
		for next < w.WD {
			if scratch == "" {
				tmp, err := os.CreateTemp("", "ckpt-inotify-")
				if err != nil {
					return fmt.Errorf("inotify: scratch file: %w", err)
				}
				tmp.Close()
				scratch = tmp.Name()
			}
			wd, err := unix.InotifyAddWatch(fd, scratch, unix.IN_ATTRIB)
			if err != nil {
				return fmt.Errorf("inotify: skip watch descriptor %d: %w", next, err)
			}
			if _, err := unix.InotifyRmWatch(fd, uint32(wd)); err != nil {
				return fmt.Errorf("inotify: skip watch descriptor %d: %w", wd, err)
			}
			next = wd + 1
		}
		path := w.Path
		if g, ok := ghosts[w.WD]; ok {
			path = g // the deleted file made again
		} else {
			var st unix.Stat_t
			if err := unix.Stat(w.Path, &st); err != nil {
				return fmt.Errorf("inotify watch %d on %s: %w", w.WD, w.Path, err)
			}
			if sameBoot && (st.Ino != w.Ino || st.Dev != w.Dev) {
				return fmt.Errorf("inotify watch %d: %s is another file than at the dump: %w", w.WD, w.Path, ErrFileChanged)
			}
		}
		mask := w.Mask
		if path != w.Path {
			mask &^= unix.IN_DONT_FOLLOW // the /proc link must be followed
		}
		wd, err := unix.InotifyAddWatch(fd, path, mask)
		if err != nil {
			return fmt.Errorf("inotify watch %d on %s: %w", w.WD, w.Path, err)
		}
		if wd != w.WD {
			return fmt.Errorf("inotify watch on %s got descriptor %d, not %d", w.Path, wd, w.WD)
		}
		next = wd + 1
	}
	// The IN_IGNORED events of the skipped descriptors, as many as are
	// queued (the description may be blocking by now: its flags are set).
	buf := make([]byte, 64<<10)
	for {
		if n, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err != nil || n <= 0 {
			return nil
		}
		if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
			return nil
		}
	}
}
