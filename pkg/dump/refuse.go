package dump

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// Refusal is state of a process that no restore can produce exactly (or
// that ckpt does not restore): the dump stops before anything irreversible
// and lets the process go on untouched. It wraps ErrUnsupported, and says
// which process, which object and why ("process 812: fd 9: io_uring
// instance: cannot be restored").
type Refusal struct {
	PID    sys.PID
	Object string // "fd 9", "mapping 7f00-7f01 [aio]", "oom_score_adj"
	Reason string
}

// Error renders the refusal as "process PID: OBJECT: REASON".
func (r *Refusal) Error() string {
	return fmt.Sprintf("process %d: %s: %s", r.PID, r.Object, r.Reason)
}

// Unwrap makes errors.Is(err, ErrUnsupported) true for every refusal.
func (r *Refusal) Unwrap() error { return ErrUnsupported }

// refuse returns the Refusal of object of process pid.
func refuse(pid sys.PID, object, format string, args ...any) error {
	return &Refusal{PID: pid, Object: object, Reason: fmt.Sprintf(format, args...)}
}

// limits is what the restoring ckpt-redo can set: its own hard limits and
// oom_score_adj, unless it has CAP_SYS_RESOURCE. The dump assumes ckpt-redo
// runs like ckpt does.
type limits struct {
	sysResource bool
	bnd         uint64 // our bounding set: what a restore can give
	oomAdj      int
	hard        map[int]uint64 // resource -> our hard limit
}

// ownLimits reads this process's limits.
func ownLimits() (*limits, error) {
	st, err := proc.ReadStatus(sys.Getpid())
	if err != nil {
		return nil, err
	}
	l := &limits{sysResource: st.CapEff&(1<<unix.CAP_SYS_RESOURCE) != 0, bnd: st.CapBnd, hard: map[int]uint64{}}
	if l.oomAdj, err = readOOMAdj(sys.Getpid()); err != nil {
		return nil, err
	}
	lims, err := proc.ReadLimits(sys.Getpid())
	if err != nil {
		return nil, err
	}
	for _, x := range lims {
		l.hard[x.Resource] = x.Max
	}
	return l, nil
}

func readOOMAdj(pid sys.PID) (int, error) {
	b, err := proc.ReadFile(proc.Path(pid, "oom_score_adj"))
	if err != nil {
		return 0, fmt.Errorf("read oom_score_adj: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// refuseChecks are the checks refuse runs on every frozen process. Each
// reads only /proc: nothing runs in the process yet.
var refuseChecks = []func(m *member, own *limits) error{
	func(m *member, own *limits) error { return refuseMappings(m.rd(), own) },
	func(m *member, own *limits) error { return refuseLimits(m.rd(), own) },
	func(m *member, own *limits) error { return refuseOOMAdj(m.rd(), own) },
	func(m *member, _ *limits) error { return refuseAutogroupNice(m.rd()) },
	func(m *member, _ *limits) error { return refuseAuditSession(m.rd()) },
	refuseThreads,
}

// ownLimitsLater reads ckpt's own limits in the background (they do not
// depend on the tree: read while it is being frozen) and returns the
// function that waits for them.
func ownLimitsLater() func() (*limits, error) {
	type result struct {
		l   *limits
		err error
	}
	c := make(chan result, 1)
	go func() {
		l, err := ownLimits()
		c <- result{l, err}
	}()
	return sync.OnceValues(func() (*limits, error) {
		r := <-c
		return r.l, r.err
	})
}

// refuse runs every check on every frozen process of the tree (zombies
// have nothing to check), before anything is read or changed: the first
// refusal aborts the dump, which releases the tree untouched. ownLater gives
// ckpt's own limits (ownLimitsLater).
func (t *tree) refuse(ownLater func() (*limits, error)) error {
	own, err := ownLater()
	if err != nil {
		return fmt.Errorf("ckpt's own limits: %w", err)
	}
	for _, m := range t.members {
		if m.fz == nil {
			continue
		}
		for _, check := range refuseChecks {
			if err := check(m, own); err != nil {
				return err
			}
		}
	}
	return nil
}

// refuseMappings refuses ranges registered with a userfaultfd by the
// program. smaps, which walks the page tables, is read only when the
// process holds a userfaultfd.
func refuseMappings(pid sys.PID, _ *limits) error {
	if !hasAnonFD(pid, "[userfaultfd]") {
		return nil
	}
	maps, err := proc.ReadSmaps(pid)
	if err != nil {
		return fmt.Errorf("read smaps: %w", err)
	}
	for _, m := range maps {
		if m.VmFlags["um"] || m.VmFlags["uw"] || m.VmFlags["ui"] {
			return refuse(pid, fmt.Sprintf("mapping %x-%x", m.Start, m.End),
				"registered with the program's own userfaultfd: the registration and its pending faults cannot be restored")
		}
	}
	return nil
}

// hasAnonFD reports whether the process has an fd on anon_inode:NAME.
func hasAnonFD(pid sys.PID, name string) bool {
	ents, err := os.ReadDir(proc.Path(pid, "fd"))
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(proc.Path(pid, "fd", e.Name())); err == nil && l == "anon_inode:"+name {
			return true
		}
	}
	return false
}

// refuseLimits refuses hard limits above ckpt's own: without
// CAP_SYS_RESOURCE no restore can raise a hard limit.
func refuseLimits(pid sys.PID, own *limits) error {
	if own.sysResource {
		return nil
	}
	lims, err := proc.ReadLimits(pid)
	if err != nil {
		return fmt.Errorf("read limits: %w", err)
	}
	for _, l := range lims {
		if mine, ok := own.hard[l.Resource]; ok && l.Max > mine {
			return refuse(pid, fmt.Sprintf("rlimit %s", rlimitName(l.Resource)),
				"hard limit %s is above ckpt's own %s, and ckpt has no CAP_SYS_RESOURCE to raise it at restore",
				limitString(l.Max), limitString(mine))
		}
	}
	return nil
}

// refuseOOMAdj refuses an oom_score_adj below ckpt's own: without
// CAP_SYS_RESOURCE the restore may not lower it that far.
func refuseOOMAdj(pid sys.PID, own *limits) error {
	if own.sysResource {
		return nil
	}
	adj, err := readOOMAdj(pid)
	if err != nil {
		return err
	}
	if adj < own.oomAdj {
		return refuse(pid, "oom_score_adj", "%d is below ckpt's own %d, and ckpt has no CAP_SYS_RESOURCE to lower it at restore", adj, own.oomAdj)
	}
	return nil
}

// refuseAutogroupNice refuses a scheduling autogroup whose nice value was
// changed (/proc/PID/autogroup). The restored processes join ckpt-redo's
// autogroup, or a new one where they call setsid: writing the nice value
// there would change it for every process of ckpt-redo's session, and an
// autogroup has no identity a restore can take back. With nice 0 (the
// default) the group's only visible trace is its number, which the kernel
// hands out from a counter. A process in ckpt's own autogroup is not
// refused: restored from the same session, it is in that group again.
// Without autogroup support the file is absent.
func refuseAutogroupNice(pid sys.PID) error {
	b, err := proc.ReadFile(proc.Path(pid, "autogroup"))
	if err != nil {
		return nil
	}
	name, nice, ok := strings.Cut(strings.TrimSpace(string(b)), " nice ")
	if !ok {
		return fmt.Errorf("/proc/%d/autogroup: %q: unknown format", pid, b)
	}
	own, _ := proc.ReadFile(proc.Path(sys.Getpid(), "autogroup"))
	if nice != "0" && !bytes.Equal(b, own) {
		return refuse(pid, "scheduling autogroup "+name, "its nice value was set to %s: the restore cannot give the process an autogroup of its own with it", nice)
	}
	return nil
}

// refuseAuditSession refuses an audit session (/proc/PID/sessionid) other
// than ckpt's own. The kernel numbers sessions from a counter: a restored
// process can only inherit ckpt-redo's session, get a new one by writing
// its loginuid, or have none (loginuid unset).
func refuseAuditSession(pid sys.PID) error {
	id, ok, err := auditSession(pid)
	if err != nil || !ok || id == noAuditSession {
		return err
	}
	own, _, err := auditSession(sys.Getpid())
	if err != nil {
		return err
	}
	if id != own {
		return refuse(pid, fmt.Sprintf("audit session %d", id), "not ckpt's own (%d): a restore can give only ckpt-redo's audit session, a new one or none; run ckpt from the same login session", own)
	}
	return nil
}

// refuseThreads refuses, in each thread, x86 linear address masking and
// user shadow stacks, which ckpt does not restore, and capabilities
// outside ckpt's own bounding set: the restored threads start with
// ckpt-redo's, and can only drop from there.
func refuseThreads(m *member, own *limits) error {
	tasks := m.fz.tasks
	if m.fz.leaderExited { // its zombie too: the restore gives it its credentials
		tasks = append([]*task{{tid: m.pid.Leader()}}, tasks...)
	}
	for _, t := range tasks {
		st, err := t.readStatus()
		if err != nil {
			return fmt.Errorf("thread %d: read status: %w", t.tid, err)
		}
		if mask := st.UntagMask; mask != ^uint64(0) {
			return refuse(m.pid, fmt.Sprintf("thread %d", t.tid), "x86 linear address masking (untag_mask %#x) is not restored", mask)
		}
		if feat := st.X86ThreadFeatures; feat != "" {
			return refuse(m.pid, fmt.Sprintf("thread %d", t.tid), "x86 thread features %q (shadow stack) are not restored", feat)
		}
		for _, c := range []struct {
			name string
			set  uint64
		}{{"CapPrm", st.CapPrm}, {"CapEff", st.CapEff}, {"CapInh", st.CapInh}, {"CapBnd", st.CapBnd}, {"CapAmb", st.CapAmb}} {
			if extra := c.set &^ own.bnd; extra != 0 {
				return refuse(m.pid, fmt.Sprintf("thread %d %s", t.tid, c.name), "capabilities %#x are outside ckpt's own bounding set %#x: no restore can give them", extra, own.bnd)
			}
		}
	}
	return nil
}

// rlimitName names an RLIMIT_* resource.
func rlimitName(r int) string {
	names := []string{"CPU", "FSIZE", "DATA", "STACK", "CORE", "RSS", "NPROC", "NOFILE", "MEMLOCK", "AS", "LOCKS", "SIGPENDING", "MSGQUEUE", "NICE", "RTPRIO", "RTTIME"}
	if r >= 0 && r < len(names) {
		return "RLIMIT_" + names[r]
	}
	return strconv.Itoa(r)
}

func limitString(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}
