package fdkind

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// fanotify is a fanotify group of the notification class with its marks
// (fdinfo): the group is made again with the same fanotify_init flags and
// event_f_flags, and each mark added again with its flags, mask and
// ignored mask, on the same inode (found by its file handle, and reached
// by its path), mount (by mount ID, reached by its mount point) or file
// system. Refused by name: events queued and not read yet (they cannot be
// put back), a group of a permission class (the decisions the process
// owes on events it read are not visible), a marked file not reachable by
// its name, a mount ckpt cannot see. (A marked file that is deleted loses
// its marks at once: the kernel removes them with the inode's last link.)
func fanotify() Kind {
	return Kind{
		Name:     image.FileFanotify,
		Match:    anon("[fanotify]"),
		Describe: describeFanotify,
		Open:     openFanotify,
		Show:     showFanotify,
	}
}

// Mark types and the FAN_MARK_* flags fdinfo shows.
const (
	fanMarkInode      = "inode"
	fanMarkMount      = "mount"
	fanMarkFilesystem = "filesystem"
	fanMarkUserFlags  = unix.FAN_MARK_IGNORED_SURV_MODIFY | unix.FAN_MARK_EVICTABLE | unix.FAN_MARK_IGNORE
	fanPermClasses    = unix.FAN_CLASS_CONTENT | unix.FAN_CLASS_PRE_CONTENT
)

func showFanotify(f *image.File) string {
	fa := event(f).Fanotify
	if fa == nil {
		return "group"
	}
	var ms []string
	for _, m := range fa.Marks {
		d := fmt.Sprintf("%s %s mask %#x", m.Type, m.Path, m.Mask)
		if m.IgnoredMask != 0 {
			d += fmt.Sprintf(" ignored %#x", m.IgnoredMask)
		}
		ms = append(ms, d)
	}
	return fmt.Sprintf("group flags %#x event-flags %#o, %d marks: %s", fa.Flags, fa.EventFlags, len(ms), strings.Join(ms, "; "))
}

func describeFanotify(env DumpEnv, s *Source, f *image.File) error {
	if s.Copy >= 0 {
		n, err := unix.IoctlGetInt(s.Copy, unix.TIOCINQ) // FIONREAD
		if err != nil {
			return fmt.Errorf("fanotify: FIONREAD: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("fanotify group with %d bytes of events not read yet: cannot be restored: %w", n, ErrUnsupported)
		}
	}
	fa := &image.Fanotify{}
	var mounts []*proc.MountInfo
	for _, line := range s.Info.Lines {
		v, ok := strings.CutPrefix(line, "fanotify ")
		if !ok {
			continue
		}
		kv := fields(v)
		if _, ok := kv["flags"]; ok {
			fl, err1 := strconv.ParseUint(kv["flags"], 16, 32)
			ef, err2 := strconv.ParseUint(kv["event-flags"], 16, 32)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("fanotify: fdinfo line %q: %w", line, image.ErrCorrupt)
			}
			fa.Flags, fa.EventFlags = uint32(fl), uint32(ef)
			continue
		}
		if mounts == nil {
			var err error
			if mounts, err = proc.ReadMountInfo(sys.Getpid()); err != nil {
				return fmt.Errorf("fanotify: %w", err)
			}
		}
		m, err := describeFanMark(v, kv, mounts)
		if err != nil {
			return err
		}
		fa.Marks = append(fa.Marks, m)
	}
	if fa.Flags&fanPermClasses != 0 {
		return fmt.Errorf("fanotify group of a permission class (flags %#x): the decisions the process owes on events it has read cannot be seen: cannot be restored: %w", fa.Flags, ErrUnsupported)
	}
	f.Event = &image.EventFile{Fanotify: fa}
	return nil
}

// fields splits "k:v k:v ..." into a map.
func fields(v string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(v) {
		if k, val, ok := strings.Cut(f, ":"); ok {
			kv[k] = val
		}
	}
	return kv
}

// describeFanMark describes one mark line of a fanotify fdinfo:
// "ino:IH sdev:DH mflags:H mask:H ignored_mask:H fhandle-bytes:.. fhandle-type:.. f_handle:..",
// "mnt_id:H mflags:H mask:H ignored_mask:H" or "sdev:H mflags:H mask:H ignored_mask:H".
func describeFanMark(line string, kv map[string]string, mounts []*proc.MountInfo) (image.FanotifyMark, error) {
	var m image.FanotifyMark
	num := func(k string) (uint64, error) {
		n, err := strconv.ParseUint(kv[k], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("fanotify mark %q: %s: %w", line, k, image.ErrCorrupt)
		}
		return n, nil
	}
	fl, err := num("mflags")
	if err != nil {
		return m, err
	}
	if m.Mask, err = num("mask"); err != nil {
		return m, err
	}
	if m.IgnoredMask, err = num("ignored_mask"); err != nil {
		return m, err
	}
	m.Flags = uint32(fl)
	if m.Flags&^fanMarkUserFlags != 0 {
		return m, fmt.Errorf("fanotify mark %q: unknown mark flags %#x: cannot be restored: %w", line, m.Flags&^fanMarkUserFlags, ErrUnsupported)
	}
	switch {
	case kv["ino"] != "":
		m.Type = fanMarkInode
		w, handle, err := parseInotifyLine("wd:1 " + line)
		if err != nil {
			return m, err
		}
		m.Dev, m.Ino = w.Dev, w.Ino
		if m.Path, err = handlePath(mounts, m.Dev, handle); err != nil {
			return m, fmt.Errorf("fanotify mark on inode %d: the marked file cannot be found (%v): cannot be restored: %w", m.Ino, err, ErrUnsupported)
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Path, &st); err != nil || st.Ino != m.Ino || st.Dev != m.Dev {
			return m, fmt.Errorf("fanotify mark: the marked file %s is no longer reachable by its name: cannot be restored: %w", m.Path, ErrUnsupported)
		}
	case kv["mnt_id"] != "":
		m.Type = fanMarkMount
		id, err := num("mnt_id")
		if err != nil {
			return m, err
		}
		mi := proc.MountByID(mounts, int(id))
		if mi == nil {
			return m, fmt.Errorf("fanotify mark on mount %d, which ckpt does not see: cannot be restored: %w", id, ErrUnsupported)
		}
		m.Path = mi.MountPoint
		var st unix.Stat_t
		if err := unix.Stat(m.Path, &st); err != nil {
			return m, fmt.Errorf("fanotify mark on mount %s: %w", m.Path, err)
		}
		m.Dev = st.Dev
	case kv["sdev"] != "":
		m.Type = fanMarkFilesystem
		sdev, err := num("sdev")
		if err != nil {
			return m, err
		}
		m.Dev = unix.Mkdev(uint32(sdev>>20), uint32(sdev&0xfffff))
		want := fmt.Sprintf("%d:%d", unix.Major(m.Dev), unix.Minor(m.Dev))
		for _, mi := range mounts {
			if mi.MajorMinorVer == want {
				m.Path = mi.MountPoint
				break
			}
		}
		if m.Path == "" {
			return m, fmt.Errorf("fanotify mark on file system %s, which no mount ckpt sees holds: cannot be restored: %w", want, ErrUnsupported)
		}
	default:
		return m, fmt.Errorf("fanotify mark %q of an unknown kind: cannot be restored: %w", line, ErrUnsupported)
	}
	return m, nil
}

func openFanotify(env RestoreEnv, f *image.File, at Where) (Desc, error) {
	fa := event(f).Fanotify
	if fa == nil {
		return Desc{}, fmt.Errorf("fanotify group without its state: %w", image.ErrCorrupt)
	}
	// The group is made with its own flags, FAN_CLOEXEC or not (fdinfo
	// shows them); ckpt-redo's fd is made close-on-exec at once, under
	// the lock that keeps a fork of ckpt-redo from taking it along.
	syscall.ForkLock.RLock()
	fd, err := unix.FanotifyInit(uint(fa.Flags), uint(fa.EventFlags))
	if err == nil && fa.Flags&unix.FAN_CLOEXEC == 0 {
		unix.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return Desc{}, fmt.Errorf("fanotify_init flags %#x event-flags %#o: %w", fa.Flags, fa.EventFlags, err)
	}
	of := os.NewFile(uintptr(fd), "fanotify")
	env.Keep(of)
	// The marks are added once every file of the tree is open: the opens
	// of the restore would otherwise show as events. fdinfo lists the
	// newest mark first: they are added oldest first.
	lastBeforeBuild(env, func() error {
		for i := len(fa.Marks) - 1; i >= 0; i-- {
			if err := addFanMark(env, fd, &fa.Marks[i]); err != nil {
				return err
			}
		}
		return nil
	})
	d, err := dupFile(of)
	if err != nil {
		return Desc{}, err
	}
	return Desc{File: d}, nil
}

// addFanMark adds one mark again: its mask, then its ignored mask.
func addFanMark(env RestoreEnv, fd int, m *image.FanotifyMark) error {
	var st unix.Stat_t
	if err := unix.Stat(m.Path, &st); err != nil {
		return fmt.Errorf("fanotify %s mark on %s: %w", m.Type, m.Path, err)
	}
	if env.SameBoot() && (st.Dev != m.Dev || (m.Type == fanMarkInode && st.Ino != m.Ino)) {
		return fmt.Errorf("fanotify %s mark: %s is another file than at the dump: %w", m.Type, m.Path, ErrFileChanged)
	}
	flags := uint(unix.FAN_MARK_ADD) | uint(m.Flags&unix.FAN_MARK_EVICTABLE)
	switch m.Type {
	case fanMarkMount:
		flags |= unix.FAN_MARK_MOUNT
	case fanMarkFilesystem:
		flags |= unix.FAN_MARK_FILESYSTEM
	case fanMarkInode:
	default:
		return fmt.Errorf("fanotify mark of type %q: %w", m.Type, image.ErrCorrupt)
	}
	if m.Mask != 0 {
		if err := unix.FanotifyMark(fd, flags, m.Mask, unix.AT_FDCWD, m.Path); err != nil {
			return fmt.Errorf("fanotify %s mark on %s, mask %#x: %w", m.Type, m.Path, m.Mask, err)
		}
	}
	if m.IgnoredMask != 0 || m.Flags&unix.FAN_MARK_IGNORED_SURV_MODIFY != 0 {
		ig := flags | uint(m.Flags&unix.FAN_MARK_IGNORED_SURV_MODIFY)
		if m.Flags&unix.FAN_MARK_IGNORE != 0 {
			ig |= unix.FAN_MARK_IGNORE
		} else {
			ig |= unix.FAN_MARK_IGNORED_MASK
		}
		if err := unix.FanotifyMark(fd, ig, m.IgnoredMask, unix.AT_FDCWD, m.Path); err != nil {
			return fmt.Errorf("fanotify %s mark on %s, ignored mask %#x: %w", m.Type, m.Path, m.IgnoredMask, err)
		}
	}
	return nil
}
