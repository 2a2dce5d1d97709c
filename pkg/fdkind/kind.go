package fdkind

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// Errors callers can branch on.
var (
	// ErrUnsupported means an fd holds something ckpt cannot save; the
	// error names the kind.
	ErrUnsupported = errors.New("unsupported")
	// ErrExternal means a file stands for something outside the dump (a
	// terminal, the other end of a pipe) that the restore cannot rebuild
	// without being told what to use instead.
	ErrExternal = errors.New("external resource")
	// ErrFileChanged means a file the process uses changed since the dump.
	ErrFileChanged = errors.New("file changed since the dump")
)

// Source is one fd of a frozen process, as the dump sees it.
type Source struct {
	PID  sys.PID
	FD   sys.TargetFD
	Link string      // the fd's link in /proc/PID/fd
	Stat unix.Stat_t // stat of the file behind it
	Info *proc.FDInfo
	// Copy is ckpt's own fd of the same open file description
	// (pidfd_getfd), -1 if none: what only the description tells (poll,
	// fcntl) is asked there, without opening the file again.
	Copy int
}

// Path is the fd's path in /proc, which opens the same file.
func (s *Source) Path() string { return proc.Path(s.PID, "fd", s.FD.String()) }

// Anon is the name of an anonymous-inode file ("[eventfd]"), or "".
func (s *Source) Anon() string {
	n, ok := strings.CutPrefix(s.Link, "anon_inode:")
	if !ok {
		return ""
	}
	return n
}

// Type is the file type bits of the file's mode (unix.S_IFREG, ...).
func (s *Source) Type() uint32 { return s.Stat.Mode & unix.S_IFMT }

// Held is one fd of the dump and the description it refers to.
type Held struct {
	PID  sys.PID
	FD   sys.TargetFD
	File *image.File
}

// Where names the first fd that uses a description being restored, for
// messages and for choices that depend on the fd number (--stdio).
type Where struct {
	PID sys.PID
	FD  sys.TargetFD
}

// String names the fd and its process, for messages.
func (w Where) String() string { return fmt.Sprintf("process %d fd %d", w.PID, w.FD) }

// Desc is a restored open file description: a file opened in ckpt-redo
// and passed to the processes, or, when File is nil, a way to open it
// inside the process itself at fd (for files that do not exist before
// the process does, such as its own /proc directory).
type Desc struct {
	File     *os.File
	InTarget func(t Target, fd sys.TargetFD, cloexec bool) error
	// Foreign marks a description that is not the dumped one but one
	// the user gave instead (a terminal with --shell-job, --stdio): its
	// flags, position and owner are left as they are.
	Foreign bool
}

// Kind is the handler of one kind of open file description.
type Kind struct {
	Name image.FileKind
	// Match tells whether an fd of the dump is of this kind.
	Match func(s *Source) bool
	// Describe saves the description behind s into f (Kind, ID, flags
	// and position are filled in by the caller). A kind the restore
	// cannot rebuild returns an error wrapping ErrUnsupported.
	Describe func(env DumpEnv, s *Source, f *image.File) error
	// Finish, if set, runs once every process of the tree is described,
	// with every fd of the dump: what needs the whole tree (whether both
	// ends of a pipe are in it).
	Finish func(env DumpEnv, fds []Held) error
	// Open rebuilds the description (restore).
	Open func(env RestoreEnv, f *image.File, at Where) (Desc, error)
	// Steps, if set, run inside each process that holds the file, once
	// every fd of that process is in place.
	Steps func(t Target, p *image.Process, f *image.File) error
	// Show says what the description is, for people (ckpt show).
	Show func(f *image.File) string
	// Seekable kinds get their position back.
	Seekable bool
}

// Find returns the kind of an fd being dumped.
func Find(s *Source) (*Kind, error) {
	for _, k := range Table() {
		if k.Match(s) {
			return &k, nil
		}
	}
	if a := s.Anon(); a != "" {
		return nil, fmt.Errorf("anonymous inode %s: %w", a, ErrUnsupported)
	}
	return nil, fmt.Errorf("file of mode %#o: %w", s.Stat.Mode, ErrUnsupported)
}

// Lookup returns the kind named in an image.
func Lookup(name image.FileKind) (*Kind, error) {
	for _, k := range Table() {
		if k.Name == name {
			return &k, nil
		}
	}
	return nil, fmt.Errorf("file kind %q: %w", name, image.ErrCorrupt)
}

// Show describes a file for people: its kind's words, or its path.
func Show(f *image.File) string {
	k, err := Lookup(f.Kind)
	if err != nil || k.Show == nil {
		return f.Ref.Path
	}
	return k.Show(f)
}

// refuse is the Describe of a kind ckpt recognises but cannot restore.
func refuse(what string) func(DumpEnv, *Source, *image.File) error {
	return func(DumpEnv, *Source, *image.File) error {
		return fmt.Errorf("%s: cannot be restored: %w", what, ErrUnsupported)
	}
}

// anon matches anonymous-inode files by their name.
func anon(names ...string) func(*Source) bool {
	return func(s *Source) bool {
		a := s.Anon()
		for _, n := range names {
			if a == n || (strings.HasSuffix(n, "*") && strings.HasPrefix(a, strings.TrimSuffix(n, "*"))) {
				return true
			}
		}
		return false
	}
}
