package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ckpt/ckpt/pkg/fdkind"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// imageSummary is what `ckpt show --json` prints.
type imageSummary struct {
	Header    image.Header     `json:"header"`
	Processes []*image.Process `json:"processes"`
	Records   int              `json:"records"`
	Pages     int64            `json:"pages"`
	ZeroPages int64            `json:"zero_pages"`
	// ParentPages are pages stored as their parent's (shared
	// copy-on-write since a fork): no data.
	ParentPages int64 `json:"parent_pages"`
	FileData    int64 `json:"file_data_bytes"`
	Bytes       int64 `json:"bytes"`

	meta *image.Meta
}

// readSummary reads a whole image directory, checking every record.
func readSummary(dir string) (*imageSummary, error) {
	f, err := image.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := summarize(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return s, nil
}

// summarize reads a whole image stream, checking every record.
func summarize(r io.Reader) (*imageSummary, error) {
	m, err := image.ReadMeta(r)
	if err != nil {
		return nil, err
	}
	s := &imageSummary{Header: m.Header, Processes: m.Processes, meta: m}
	for _, d := range m.FileData {
		s.FileData += int64(len(d))
	}
	pr := m.Pages()
	for {
		pg, _, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		for _, run := range pg.Runs {
			switch {
			case run.Zero:
				s.ZeroPages += int64(run.Pages)
			case run.Parent:
				s.ParentPages += int64(run.Pages)
			default:
				s.Pages += int64(run.Pages)
			}
		}
	}
	s.Records, s.Bytes = pr.Records(), pr.Offset()
	return s, nil
}

func showCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print what an image holds (every record is checked)",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print everything as JSON"},
		},
		Action: func(c *cli.Context) error {
			dir, err := oneArg(c, "show", "DIR")
			if err != nil {
				return err
			}
			s, err := readSummary(dir)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(s)
			}
			printSummary(os.Stdout, s)
			return nil
		},
	}
}

func size(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dK", n>>10)
}

func protString(p int, shared bool) string {
	b := []byte("---p")
	if p&unix.PROT_READ != 0 {
		b[0] = 'r'
	}
	if p&unix.PROT_WRITE != 0 {
		b[1] = 'w'
	}
	if p&unix.PROT_EXEC != 0 {
		b[2] = 'x'
	}
	if shared {
		b[3] = 's'
	}
	return string(b)
}

// fileDesc says what an open file description is, for one line of `ckpt
// show`: its kind's words (pkg/fdkind), the bytes buffered in it, its
// locks.
func fileDesc(f *image.File, data map[int][]byte) string {
	desc := fdkind.Show(f)
	if f.Pipe != nil && f.Pipe.DataID != 0 {
		desc += fmt.Sprintf(", %d bytes buffered", len(data[f.Pipe.DataID]))
	}
	if len(f.Locks) > 0 {
		desc += "; " + fdkind.ShowLocks(f.Locks)
	}
	if desc == "" {
		desc = "?"
	}
	return desc
}

func printSummary(w io.Writer, s *imageSummary) {
	h := &s.Header
	fmt.Fprintf(w, "image: %d records, %s; taken %s on %s (kernel %s, %s)\n", s.Records, size(uint64(s.Bytes)),
		h.Created.Format("2006-01-02 15:04:05 MST"), h.Hostname, h.Kernel, h.Machine)
	fmt.Fprintf(w, "cpu: %s, xcr0 %#x, xstate %d bytes\n", h.CPU.Model, h.CPU.XCR0, h.CPU.XSaveSize)
	fmt.Fprintf(w, "memory: %d pages with data (%s), %d zero pages", s.Pages, size(uint64(s.Pages)*image.PageSize), s.ZeroPages)
	if s.ParentPages > 0 {
		fmt.Fprintf(w, ", %d pages shared with the parent (copy-on-write, stored once)", s.ParentPages)
	}
	fmt.Fprintln(w)
	if h.NetLock != "" {
		fmt.Fprintf(w, "network lock: %s (lifted by the restore, or by ckpt unlock)\n", h.NetLock)
	}
	for _, p := range s.Processes {
		if p.Zombie {
			fmt.Fprintf(w, "\nprocess %d (%s) ppid %d pgid %d sid %d: zombie, wait status %#x\n",
				p.PID, p.Comm, p.PPID, p.PGID, p.SID, p.ExitStatus)
			continue
		}
		fmt.Fprintf(w, "\nprocess %d (%s) ppid %d pgid %d sid %d\n  exe %s\n  cmdline %s\n  cwd %s  umask %04o  uid %v gid %v\n",
			p.PID, p.Comm, p.PPID, p.PGID, p.SID, p.Exe, p.Cmdline, showCwd(&p.Misc), p.Misc.Umask, p.Creds.UID, p.Creds.GID)
		for _, t := range p.Threads {
			insys := ""
			if t.InSyscall >= 0 {
				insys = fmt.Sprintf(" in syscall %d", t.InSyscall)
			}
			fmt.Fprintf(w, "  thread %d (%s) state %s%s: rip %#x rsp %#x fs_base %#x, xstate %d bytes, sigmask %#x, %d pending\n",
				t.TID, t.Comm, t.State, insys, t.Regs.Rip, t.Regs.Rsp, t.Regs.FsBase, len(t.XState), t.SigMask, len(t.Pending))
		}
		if p.VforkOf != 0 {
			fmt.Fprintf(w, "  vfork() child of %d, which waits for it: runs in its memory\n", p.VforkOf)
		}
		fmt.Fprintf(w, "  VMAs (%d):\n", len(p.VMAs))
		tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
		for _, v := range p.VMAs {
			pages := fmt.Sprintf("%d pages", v.Pages)
			if v.ParentPages > 0 {
				pages += fmt.Sprintf(" (%d the parent's)", v.ParentPages)
			}
			fmt.Fprintf(tw, "    %012x-%012x\t%s\t%s\t%s\t%s\t%s\n", v.Start, v.End, protString(v.Prot, v.Shared), size(v.Len()), v.Kind, pages, v.Name)
		}
		tw.Flush()
		fmt.Fprintf(w, "  fds (%d):\n", len(p.FDs))
		for _, fd := range p.FDs {
			fmt.Fprintf(w, "    %s\n", fdLine(s, p, fd))
		}
		var handled []string
		for i, a := range p.Signals.Actions {
			switch a.Handler {
			case 0:
				continue
			case 1:
				handled = append(handled, fmt.Sprintf("%d:ignore", i+1))
			default:
				handled = append(handled, fmt.Sprintf("%d:%#x", i+1, a.Handler))
			}
		}
		sort.Strings(handled)
		fmt.Fprintf(w, "  signal handlers: %s\n  pending: %d shared\n", strings.Join(handled, " "), len(p.Signals.Pending))
		if t := p.Timers.Real; t.ValueUs != 0 {
			fmt.Fprintf(w, "  itimer real: %dus every %dus\n", t.ValueUs, t.IntervalUs)
		}
		if len(p.Timers.Posix) > 0 {
			fmt.Fprintf(w, "  posix timers: %d\n", len(p.Timers.Posix))
		}
	}
}

// fdLine is one fd of a process: its number, the kind of its file, what
// the file is, and the file's ID, status flags and position. File IDs are
// image-wide: the file may be listed by another process (shared).
func fdLine(s *imageSummary, p *image.Process, fd image.FD) string {
	f, ok := s.meta.File(fd.File)
	if !ok {
		return fmt.Sprintf("%3d ?        file %d not in the image", fd.FD, fd.File)
	}
	extra := fmt.Sprintf("file %d, flags %#o", f.ID, f.Flags)
	if f.Kind == image.FileRegular || f.Kind == image.FileDir {
		extra += fmt.Sprintf(", pos %d", f.Pos)
	}
	if fd.CloExec {
		extra += ", cloexec"
	}
	if len(fd.Locks) > 0 {
		extra += ", " + fdkind.ShowLocks(fd.Locks)
	}
	if !slices.ContainsFunc(p.Files, func(g image.File) bool { return g.ID == f.ID }) {
		extra += ", shared"
	}
	return fmt.Sprintf("%3d %-8s %s (%s)", fd.FD, f.Kind, fileDesc(f, s.meta.FileData), extra)
}

// showCwd is the working directory (said deleted if it was) and, when it
// is not /, the root directory (chroot).
func showCwd(m *image.ProcMisc) string {
	s := m.Cwd
	if m.CwdRef != nil && m.CwdRef.Deleted {
		s += " (deleted)"
	}
	if m.Root != "" && m.Root != "/" {
		s += "  root " + m.Root
	}
	return s
}
