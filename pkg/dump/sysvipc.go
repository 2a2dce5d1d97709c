package dump

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/proc"
	"golang.org/x/sys/unix"
)

// sysvShm describes System V shared memory segment id and how many
// attachments it has.
func sysvShm(id uint64) (*image.SysVShm, uint64, error) {
	rows, err := proc.ReadSysVIPC("shm")
	if err != nil {
		return nil, 0, err
	}
	for _, r := range rows {
		if r["shmid"] != strconv.FormatUint(id, 10) {
			continue
		}
		s := &image.SysVShm{ID: int(id)}
		num := func(col string, base int) uint64 {
			v, e := strconv.ParseInt(r[col], base, 64)
			if e != nil && err == nil {
				err = fmt.Errorf("/proc/sysvipc/shm: %s %q: %w", col, r[col], e)
			}
			return uint64(v)
		}
		s.Key = int32(num("key", 10))
		s.Mode = uint32(num("perms", 8))
		s.Size = num("size", 10)
		s.UID, s.GID = uint32(num("uid", 10)), uint32(num("gid", 10))
		s.CUID, s.CGID = uint32(num("cuid", 10)), uint32(num("cgid", 10))
		nattch := num("nattch", 10)
		return s, nattch, err
	}
	return nil, 0, fmt.Errorf("segment %d not in /proc/sysvipc/shm", id)
}

// checkSysV refuses what the tree uses of System V IPC that cannot be
// restored: a shared memory segment also attached outside the tree, and
// semaphores it operated on last (semctl GETPID) when the process has
// SEM_UNDO operations: a semop with SEM_UNDO leaves adjustments in the
// process that no interface reads, and that the kernel applies when it
// exits. It returns the message queues the tree sent to or received from
// last, with their messages, and the semaphore sets it operated on last,
// with their values, for the image.
func checkSysV(members []*member) ([]image.SysVMsgQueue, []image.SysVSemSet, error) {
	inTree := map[string]sys.PID{}
	attached := map[uint64]int{}
	where := map[uint64]string{}
	nattch := map[uint64]uint64{}
	for _, m := range members {
		inTree[m.pid.String()] = m.pid
		if m.p == nil || m.p.Zombie {
			continue
		}
		for _, v := range m.p.VMAs {
			if v.Kind != image.VMASysVShm {
				continue
			}
			attached[v.ShmID]++
			if _, ok := where[v.ShmID]; !ok {
				where[v.ShmID] = fmt.Sprintf("process %d mapping %#x-%#x", m.pid, v.Start, v.End)
			}
		}
	}
	for id, n := range attached {
		_, nat, err := sysvShm(id)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: SysV shared memory segment %d: %w", where[id], id, err)
		}
		nattch[id] = nat
		if nat > uint64(n) {
			return nil, nil, fmt.Errorf("%s: SysV shared memory segment %d is also attached by processes outside the dump (%d attachments, %d in the tree): cannot be restored: %w",
				where[id], id, nat, n, ErrUnsupported)
		}
	}
	queues, err := sysvMsgQueues(inTree)
	if err != nil {
		return nil, nil, err
	}
	var sems []image.SysVSemSet
	rows, err := proc.ReadSysVIPC("sem")
	if err != nil {
		return queues, nil, nil // no SysV IPC here
	}
	for _, r := range rows {
		id, err1 := strconv.Atoi(r["semid"])
		n, err2 := strconv.Atoi(r["nsems"])
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("/proc/sysvipc/sem: semid %q nsems %q", r["semid"], r["nsems"])
		}
		set := image.SysVSemSet{ID: id, PIDs: make([]int32, n)}
		used := sys.PID(0)
		for i := 0; i < n; i++ {
			last, err := sys.SemGetPID(id, i)
			if err != nil {
				break // removed meanwhile
			}
			set.PIDs[i] = int32(last)
			pid, ok := inTree[strconv.Itoa(int(last))]
			if !ok {
				continue
			}
			if !noSemUndo(pid) {
				return nil, nil, fmt.Errorf("process %d: SysV semaphore set %d (key %s): the process has SEM_UNDO operations (adjustments per process that no interface reads): cannot be restored: %w", pid, id, r["key"], ErrUnsupported)
			}
			used = pid
		}
		if used == 0 {
			continue
		}
		ds, err := sys.SemStat(id)
		if err != nil {
			return nil, nil, fmt.Errorf("process %d: SysV semaphore set %d: %w", used, id, err)
		}
		if set.Values, err = sys.SemGetAll(id, n); err != nil {
			return nil, nil, fmt.Errorf("process %d: SysV semaphore set %d: %w", used, id, err)
		}
		set.Key, set.OTime, set.CTime = ds.Perm.Key, ds.OTime, ds.CTime
		sems = append(sems, set)
	}
	return queues, sems, nil
}

// noSemUndo tells whether process pid has no list of SEM_UNDO operations:
// it never did a semop with SEM_UNDO nor made a thread (CLONE_SYSVSEM makes
// the list). kcmp KCMP_SYSVSEM compares its list with kthreadd's, which a
// kernel thread never has; where kthreadd is not to be seen (in a PID
// namespace) the answer is no.
func noSemUndo(pid sys.PID) bool {
	st, err := proc.ReadStat(2, 0)
	if err != nil || st.Comm != "kthreadd" || st.Flags&proc.PFKthread == 0 {
		return false
	}
	same, err := sys.SameSemUndo(pid, 2)
	return err == nil && same
}

// sysvMsgQueues reads the message queues a process of the tree (inTree:
// PID text -> PID) sent to or received from last: their state
// (msgctl IPC_STAT) and their messages, copied with MSG_COPY, which leaves
// them in the queue for the process or a --leave-running dump.
func sysvMsgQueues(inTree map[string]sys.PID) ([]image.SysVMsgQueue, error) {
	rows, err := proc.ReadSysVIPC("msg")
	if err != nil {
		return nil, nil // no SysV IPC here
	}
	var out []image.SysVMsgQueue
	for _, r := range rows {
		pid, ok := inTree[r["lspid"]]
		if !ok {
			if pid, ok = inTree[r["lrpid"]]; !ok {
				continue
			}
		}
		id, err := strconv.Atoi(r["msqid"])
		if err != nil {
			return nil, fmt.Errorf("/proc/sysvipc/msg: msqid %q", r["msqid"])
		}
		q, err := sysvMsgQueue(id)
		if err != nil {
			return nil, fmt.Errorf("process %d: SysV message queue %d (key %s): %w", pid, id, r["key"], err)
		}
		out = append(out, *q)
	}
	return out, nil
}

// sysvMsgQueue reads message queue id and its messages.
func sysvMsgQueue(id int) (*image.SysVMsgQueue, error) {
	ds, err := sys.MsgStat(id)
	if err != nil {
		return nil, err
	}
	q := &image.SysVMsgQueue{
		Key: ds.Perm.Key, ID: id, Mode: ds.Perm.Mode & 0o777,
		UID: ds.Perm.Uid, GID: ds.Perm.Gid, CUID: ds.Perm.Cuid, CGID: ds.Perm.Cgid,
		QBytes: ds.QBytes, LSPID: sys.PID(ds.LSPID), LRPID: sys.PID(ds.LRPID),
		STime: ds.STime, RTime: ds.RTime, CTime: ds.CTime,
	}
	var total uint64
	for i := 0; i < int(ds.QNum); i++ {
		typ, text, err := sys.MsgPeek(id, i, int(ds.QBytes))
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("reading its messages needs msgrcv MSG_COPY (CONFIG_CHECKPOINT_RESTORE): %w", ErrUnsupported)
		}
		if err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i, ds.QNum, err)
		}
		q.Messages = append(q.Messages, image.SysVMsg{Type: typ, Text: text})
		total += uint64(len(text))
	}
	if total != ds.CBytes {
		return nil, fmt.Errorf("its messages hold %d bytes, the queue says %d (changed while frozen: used by a process outside the dump?)", total, ds.CBytes)
	}
	return q, nil
}
