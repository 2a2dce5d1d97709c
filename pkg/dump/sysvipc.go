package dump

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

const (
	shmDest   = 0o1000 // SHM_DEST: marked for removal (IPC_RMID) while attached
	shmLocked = 0o2000 // SHM_LOCKED
)

// sysvTable reads a /proc/sysvipc table: one map of column name to value
// per row.
func sysvTable(name string) ([]map[string]string, error) {
	f, err := os.Open("/proc/sysvipc/" + name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var cols []string
	var out []map[string]string
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if cols == nil {
			cols = fs
			continue
		}
		if len(fs) < len(cols) {
			return nil, fmt.Errorf("/proc/sysvipc/%s: short line %q", name, sc.Text())
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = fs[i]
		}
		out = append(out, row)
	}
	return out, sc.Err()
}

// sysvShm describes System V shared memory segment id and how many
// attachments it has.
func sysvShm(id uint64) (*image.SysVShm, uint64, error) {
	rows, err := sysvTable("shm")
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
// restored: a shared memory segment also attached outside the tree,
// message queues the tree sent to or received from last, and semaphores
// it operated on last (semctl GETPID). Queues and semaphore sets are not
// in the image: they stay in the IPC namespace when the processes die.
func checkSysV(members []*member) error {
	inTree := map[string]int{}
	attached := map[uint64]int{}
	where := map[uint64]string{}
	nattch := map[uint64]uint64{}
	for _, m := range members {
		inTree[strconv.Itoa(m.pid)] = m.pid
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
			return fmt.Errorf("%s: SysV shared memory segment %d: %w", where[id], id, err)
		}
		nattch[id] = nat
		if nat > uint64(n) {
			return fmt.Errorf("%s: SysV shared memory segment %d is also attached by processes outside the dump (%d attachments, %d in the tree): cannot be restored: %w",
				where[id], id, nat, n, ErrUnsupported)
		}
	}
	rows, err := sysvTable("msg")
	if err != nil {
		return nil // no SysV IPC here
	}
	for _, r := range rows {
		for _, col := range []string{"lspid", "lrpid"} {
			if pid, ok := inTree[r[col]]; ok {
				return fmt.Errorf("process %d: SysV message queue %s (key %s): cannot be restored: %w", pid, r["msqid"], r["key"], ErrUnsupported)
			}
		}
	}
	if rows, err = sysvTable("sem"); err != nil {
		return nil
	}
	for _, r := range rows {
		id, err1 := strconv.Atoi(r["semid"])
		n, err2 := strconv.Atoi(r["nsems"])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("/proc/sysvipc/sem: semid %q nsems %q", r["semid"], r["nsems"])
		}
		for i := 0; i < n; i++ {
			last, _, errno := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), uintptr(i), semGetPID, 0, 0, 0)
			if errno != 0 {
				continue // removed meanwhile
			}
			if pid, ok := inTree[strconv.Itoa(int(last))]; ok {
				return fmt.Errorf("process %d: SysV semaphore set %d (key %s): cannot be restored: %w", pid, id, r["key"], ErrUnsupported)
			}
		}
	}
	return nil
}

// semGetPID is semctl's GETPID: the last process that operated on a
// semaphore.
const semGetPID = 11
