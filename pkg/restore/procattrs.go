package restore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// Process and thread attributes (pkg/inventory: process, thread, creds):
// the counterpart of pkg/dump/procattrs.go.

const (
	prSetMDWE       = 0x41
	capVersion3     = 0x20080522
	secbitKeepCaps  = 1 << 4
	secbitNoFixup   = 1 << 2
	sizeofSchedAttr = 56
	schedFlagUclamp = 0x20 | 0x40 // SCHED_FLAG_UTIL_CLAMP_MIN | _MAX
	schedFlagKeep   = 0x08 | 0x10 // SCHED_FLAG_KEEP_POLICY | _PARAMS
)

// procAttrs sets the process-wide attributes: oom_score_adj and
// coredump_filter from outside, loginuid, the child-subreaper flag, THP
// disabling and membarrier registrations from inside. It runs before the
// credentials change (loginuid needs CAP_AUDIT_CONTROL).
func (b *builder) procAttrs() error {
	m := &b.p.Misc
	if err := os.WriteFile(proc.Path(b.target, "oom_score_adj"), []byte(strconv.Itoa(m.OOMScoreAdj)), 0); err != nil {
		return fmt.Errorf("oom_score_adj %d: %w", m.OOMScoreAdj, err)
	}
	if m.CoredumpFilter != nil {
		if err := os.WriteFile(proc.Path(b.target, "coredump_filter"), []byte(fmt.Sprintf("%#x", *m.CoredumpFilter)), 0); err != nil {
			return fmt.Errorf("coredump_filter %#x: %w", *m.CoredumpFilter, err)
		}
	}
	if err := b.loginUID(); err != nil {
		return err
	}
	if err := b.auditSession(); err != nil {
		return err
	}
	if m.ChildSubreaper {
		if _, err := b.call("prctl(PR_SET_CHILD_SUBREAPER)", unix.SYS_PRCTL, unix.PR_SET_CHILD_SUBREAPER, 1); err != nil {
			return err
		}
	}
	if m.THPDisable&1 != 0 {
		if _, err := b.call("prctl(PR_SET_THP_DISABLE)", unix.SYS_PRCTL, unix.PR_SET_THP_DISABLE, 1, uint64(m.THPDisable&^1), 0, 0); err != nil {
			return err
		}
	}
	for bit := 0; bit < 16; bit++ {
		if cmd := uint64(1) << bit; m.Membarrier&int(cmd) != 0 {
			if _, err := b.call(fmt.Sprintf("membarrier(register %#x)", cmd), unix.SYS_MEMBARRIER, cmd, 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// auditSession checks that the process is in the audit session it was in
// (/proc/PID/sessionid): that of ckpt-redo, inherited, when the dump was
// made in the same login session, or none when its loginuid is unset.
// The kernel numbers sessions from a counter that nothing sets.
func (b *builder) auditSession() error {
	want := b.p.Misc.AuditSession
	if want == nil {
		return nil
	}
	cur, err := os.ReadFile(proc.Path(b.target, "sessionid"))
	if err != nil {
		return fmt.Errorf("audit session %d: %w", *want, err)
	}
	if got := strings.TrimSpace(string(cur)); got != strconv.FormatUint(uint64(*want), 10) {
		return fmt.Errorf("audit session %d came back as %s: ckpt-redo must run in the login session of the dump: %w", *want, got, ErrAuditSession)
	}
	return nil
}

// ErrAuditSession says the restored process would not be in its audit
// session.
var ErrAuditSession = errors.New("audit session cannot be had again")

// loginUID writes the audit login uid: only the process itself may write
// its /proc/self/loginuid.
func (b *builder) loginUID() error {
	want := b.p.Misc.LoginUID
	if want == nil {
		return nil
	}
	cur, err := os.ReadFile(proc.Path(b.target, "loginuid"))
	if err == nil && strings.TrimSpace(string(cur)) == strconv.FormatUint(uint64(*want), 10) {
		return nil
	}
	if err := b.writeString(scratchPathOff, "/proc/self/loginuid"); err != nil {
		return err
	}
	val := strconv.FormatUint(uint64(*want), 10)
	if err := b.writeString(scratchOff, val); err != nil {
		return err
	}
	fd, err := b.call("open /proc/self/loginuid", unix.SYS_OPENAT, uint64(unix.AT_FDCWD&0xffffffffffffffff), b.gadget+scratchPathOff, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, werr := b.call("write loginuid "+val, unix.SYS_WRITE, fd, b.gadget+scratchOff, uint64(len(val)))
	if _, err := b.call("close", unix.SYS_CLOSE, fd); err != nil && werr == nil {
		werr = err
	}
	return werr
}

// threadSched sets thread i's timer slack, scheduling policy and
// parameters, CPU affinity and I/O priority. ckpt-redo sets them from
// outside, by TID (root may), which costs no injected call. The slack
// goes first: a real-time policy makes the kernel ignore it. cur holds
// the thread controls the thread has now (see threadCtl).
func (b *builder) threadSched(i int, cur threadControls) error {
	th := &b.p.Threads[i]
	s := th.Sched
	if s == nil {
		return nil // an image without thread attributes
	}
	slack := strconv.FormatUint(th.TimerSlack, 10)
	if err := os.WriteFile(proc.ThreadPath(th.TID, "timerslack_ns"), []byte(slack), 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	flags := s.Flags &^ (schedFlagUclamp | schedFlagKeep)
	if s.UtilMin != 0 || (s.UtilMax != 0 && s.UtilMax != 1024) {
		flags |= schedFlagUclamp
	}
	attr := unix.SchedAttr{
		Size: unix.SizeofSchedAttr, Policy: s.Policy, Flags: flags, Nice: int32(s.Nice), Priority: s.Priority,
		Runtime: s.Runtime, Deadline: s.Deadline, Period: s.Period, Util_min: s.UtilMin, Util_max: s.UtilMax,
	}
	if len(th.Affinity) > 0 {
		// Real-time (and deadline) policies come after the affinity:
		// SCHED_DEADLINE refuses an affinity narrower than its root domain.
		var set unix.CPUSet
		for k, w := range th.Affinity {
			for bit := 0; bit < 64; bit++ {
				if w&(1<<bit) != 0 {
					set.Set(64*k + bit)
				}
			}
		}
		if err := unix.SchedSetaffinity(int(th.TID), &set); err != nil {
			return fmt.Errorf("sched_setaffinity: %w", err)
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(int(th.TID), &got); err != nil {
			return fmt.Errorf("sched_getaffinity: %w", err)
		}
		for k := range got {
			want := uint64(0)
			if k < len(th.Affinity) {
				want = th.Affinity[k]
			}
			if uint64(got[k]) != want {
				return fmt.Errorf("CPU affinity word %d is %#x, the image has %#x (CPUs missing here, or a cpuset): %w", k, uint64(got[k]), want, ErrIncompatible)
			}
		}
	}
	if err := unix.SchedSetAttr(int(th.TID), &attr, 0); err != nil {
		return fmt.Errorf("sched_setattr(policy %d): %w", s.Policy, err)
	}
	if err := sys.IoprioSet(th.TID, th.IOPrio); err != nil {
		return err
	}
	return b.threadCtl(i, cur)
}

// threadCtl sets thread i's speculation controls, TSC and machine-check
// policies where they differ from what the new thread has (cur, asked
// in threadsMisc' batch).
func (b *builder) threadCtl(i int, cur threadControls) error {
	th, in := &b.p.Threads[i], b.ins[i]
	for w, want := range th.SpecCtrl {
		if want < 0 || cur.spec[w] == want {
			continue // the control did not exist where it was dumped, or is the same
		}
		mode := uint64(want) &^ unix.PR_SPEC_PRCTL
		if want&unix.PR_SPEC_PRCTL == 0 || mode == 0 {
			return fmt.Errorf("speculation control %d is %#x here, the image has %#x, which a prctl cannot set: %w", w, int32(cur.spec[w]), want, ErrIncompatible)
		}
		if _, err := in.Call(fmt.Sprintf("prctl(PR_SET_SPECULATION_CTRL %d %#x)", w, mode), unix.SYS_PRCTL, unix.PR_SET_SPECULATION_CTRL, uint64(w), mode, 0, 0); err != nil {
			return err
		}
	}
	if th.TSC == unix.PR_TSC_SIGSEGV {
		if _, err := in.Call("prctl(PR_SET_TSC)", unix.SYS_PRCTL, unix.PR_SET_TSC, unix.PR_TSC_SIGSEGV); err != nil {
			return err
		}
	}
	if cur.mce != th.MCEKill {
		how, policy := uint64(unix.PR_MCE_KILL_SET), uint64(th.MCEKill)
		if th.MCEKill == unix.PR_MCE_KILL_DEFAULT {
			how, policy = unix.PR_MCE_KILL_CLEAR, 0
		}
		if _, err := in.Call("prctl(PR_MCE_KILL)", unix.SYS_PRCTL, unix.PR_MCE_KILL, how, policy, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

// threadCreds returns the credentials of thread i.
func (b *builder) threadCreds(i int) *image.Creds {
	if c := b.p.Threads[i].Creds; c != nil {
		return c
	}
	return &b.p.Creds
}

// askCreds fills tb with the calls that give thread i its credentials,
// in an order where each step still has the privilege it needs:
// keep-caps and no setuid fixup while the ids change, then the
// inheritable set (with ckpt-redo's permitted set still there), the
// ambient set, the bounding set, the securebits (locks included),
// no_new_privs and the seccomp filters (while CAP_SYS_ADMIN is still
// there), and last the permitted and effective sets. Where the ids and
// groups are the thread's already, only what differs from what it has
// (its status, and securebits curBits) is set. It returns false if the
// calls' data (groups, filters) do not fit tb.
func (b *builder) askCreds(i int, tb *threadBatch, curBits int) bool {
	c, in := b.threadCreds(i), b.ins[i]
	size := 4*len(c.Groups) + 2*48
	for _, f := range c.Filters {
		size += 16 + len(f) + 16
	}
	if !tb.fits(size) {
		return false
	}
	st, err := proc.ReadThreadStatus(in.TID)
	if err != nil {
		tb.err = err
		return true
	}
	curPrm, curBnd := st.CapPrm, st.CapBnd
	full := c.UID != st.UID || c.GID != st.GID || !slices.Equal(c.Groups, st.Groups)
	if full {
		tb.add("prctl(PR_SET_SECUREBITS keep-caps)", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, secbitKeepCaps|secbitNoFixup)
		groups := make([]byte, 4*len(c.Groups))
		for k, g := range c.Groups {
			binary.LittleEndian.PutUint32(groups[4*k:], uint32(g))
		}
		ga, err := tb.put(groups)
		if err != nil {
			tb.err = err
			return true
		}
		tb.add("setgroups", unix.SYS_SETGROUPS, uint64(len(c.Groups)), ga)
		tb.add("setresgid", unix.SYS_SETRESGID, uint64(c.GID[0]), uint64(c.GID[1]), uint64(c.GID[2]))
		tb.addAny(unix.SYS_SETFSGID, uint64(c.GID[3])) // returns the previous id, not an error
		tb.add("setresuid", unix.SYS_SETRESUID, uint64(c.UID[0]), uint64(c.UID[1]), uint64(c.UID[2]))
		tb.addAny(unix.SYS_SETFSUID, uint64(c.UID[3]))
	}
	if full || c.CapInh != st.CapInh {
		if err := capset(tb, curPrm, curPrm, c.CapInh); err != nil {
			tb.err = err
			return true
		}
	}
	if full || c.CapAmb != st.CapAmb {
		for capn := 0; capn < 64; capn++ {
			if c.CapAmb&(1<<capn) != 0 {
				tb.add(fmt.Sprintf("prctl(PR_CAP_AMBIENT_RAISE %d)", capn), unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uint64(capn), 0, 0)
			}
		}
	}
	for capn := 0; capn < 64; capn++ {
		if curBnd&(1<<capn) != 0 && c.CapBnd&(1<<capn) == 0 {
			tb.add(fmt.Sprintf("prctl(PR_CAPBSET_DROP %d)", capn), unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uint64(capn))
		}
	}
	if full || c.Securebits != curBits {
		tb.add(fmt.Sprintf("prctl(PR_SET_SECUREBITS %#x)", c.Securebits), unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uint64(c.Securebits))
	}
	if err := b.seccomp(tb, i, st.NoNewPrivs); err != nil {
		tb.err = fmt.Errorf("seccomp: %w", err)
		return true
	}
	if full || c.CapEff != st.CapEff || c.CapPrm != st.CapPrm || c.CapInh != st.CapInh {
		if err := capset(tb, c.CapEff, c.CapPrm, c.CapInh); err != nil {
			tb.err = err
		}
	}
	return true
}

// capset adds to tb the call that sets the three capability sets.
func capset(tb *threadBatch, eff, prm, inh uint64) error {
	// struct __user_cap_header_struct {u32 version; int pid}, then two
	// struct __user_cap_data_struct {u32 effective, permitted, inheritable}.
	var buf [8 + 24]byte
	le := binary.LittleEndian
	le.PutUint32(buf[0:], capVersion3)
	for k, v := range []uint64{eff, prm, inh} {
		le.PutUint32(buf[8+4*k:], uint32(v))
		le.PutUint32(buf[8+12+4*k:], uint32(v>>32))
	}
	a, err := tb.put(buf[:])
	if err != nil {
		return err
	}
	tb.add(fmt.Sprintf("capset(eff %#x prm %#x inh %#x)", eff, prm, inh), unix.SYS_CAPSET, a, a+8)
	return nil
}

// mdwe turns memory-deny-write-execute back on, once no more executable
// memory is mapped or made writable.
func (b *builder) mdwe() error {
	if b.p.Misc.MDWE == 0 {
		return nil
	}
	_, err := b.call("prctl(PR_SET_MDWE)", unix.SYS_PRCTL, prSetMDWE, uint64(b.p.Misc.MDWE), 0, 0, 0)
	return err
}
