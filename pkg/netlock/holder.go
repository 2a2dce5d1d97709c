package netlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// HoldCommand is the hidden ckpt subcommand that runs RunHolder.
const HoldCommand = "netlock-hold"

// A Holder keeps the packets a lock queues (the peers' packets to the
// locked connections and listeners) without a verdict, until Release
// asks it to let them all through, or until its lock is gone. It is
// reached through an abstract UNIX socket named after its lock table
// (controlName) in the lock's network namespace, so that whoever lifts a
// lock finds its holder from the table name alone.
type Holder struct {
	// Queue is the nfnetlink_queue number the holder has bound.
	Queue uint16
	table string
	netns int
	q     *nfqueue
	ln    *net.UnixListener

	mu        sync.Mutex
	maxID     uint32
	held      int
	accepting bool

	once sync.Once
	done chan struct{}
}

// holderGrace is how long a holder waits for its lock table to appear.
const holderGrace = 30 * time.Second

// controlName is the abstract UNIX socket name of the holder of a lock.
func controlName(tableName string) string { return "@ckpt-netlock/" + tableName }

// Hold starts holding, in the calling process, the packets a lock table
// named tableName (to be taken with TakeQueued and Holder.Queue) will
// queue in the network namespace netns (an fd, or negative for the
// caller's). It lives as long as the caller.
func Hold(tableName string, netns int) (*Holder, error) {
	h, err := newHolder(tableName, netns)
	if err != nil {
		return nil, err
	}
	h.start()
	return h, nil
}

// newHolder binds a queue and makes the control socket, in the network
// namespace netns. The queue number is the first one from QueueBase that
// no lock table of the namespace uses and no other socket has bound.
func newHolder(tableName string, netns int) (*Holder, error) {
	used, err := usedQueues(netns)
	if err != nil {
		return nil, err
	}
	h := &Holder{table: tableName, netns: netns, done: make(chan struct{})}
	for n := QueueBase; n < QueueBase+QueueCount && h.q == nil; n++ {
		if used[uint16(n)] {
			continue
		}
		q, err := bindQueue(netns, uint16(n))
		if errors.Is(err, ErrQueueBusy) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netlock: holder: %w", err)
		}
		h.q, h.Queue = q, uint16(n)
	}
	if h.q == nil {
		return nil, fmt.Errorf("netlock: holder: every queue from %d to %d is taken", QueueBase, QueueBase+QueueCount-1)
	}
	err = sys.InNetns(netns, func() error {
		var err error
		h.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: controlName(tableName), Net: "unix"})
		return err
	})
	if err != nil {
		h.q.close()
		return nil, fmt.Errorf("netlock: holder: control socket: %w", err)
	}
	return h, nil
}

func (h *Holder) start() {
	go h.receive()
	go h.serve()
	go h.watch()
}

// Done is closed when the holder has stopped.
func (h *Holder) Done() <-chan struct{} { return h.done }

// Close stops the holder without a verdict: the kernel drops what it held.
func (h *Holder) Close() {
	h.once.Do(func() {
		close(h.done)
		h.ln.Close()
		h.q.close()
	})
}

func (h *Holder) stopped() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// receive records the id of every packet queued; once released, it lets
// each one through at once.
func (h *Holder) receive() {
	buf := make([]byte, 1<<16)
	for !h.stopped() {
		ids, err := h.q.receive(buf, time.Now().Add(250*time.Millisecond))
		if err != nil {
			if !h.stopped() {
				h.Close()
			}
			return
		}
		if len(ids) == 0 {
			continue
		}
		h.mu.Lock()
		for _, id := range ids {
			h.maxID = max(h.maxID, id)
			h.held++
		}
		if h.accepting {
			h.q.acceptAll(h.maxID)
		}
		h.mu.Unlock()
	}
}

// release lets every packet held so far through, and every later one.
func (h *Holder) release() (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.accepting = true
	// Also what is queued but not read yet: the table is removed next,
	// and the kernel would drop it.
	return h.held, h.q.acceptAll(h.maxID)
}

// serve answers "release" on the control socket: the held packets go
// through, the answer is "released N", and the holder stops once the
// asker closes the connection (it removes the lock table first). To
// "discard" it stops at once without a verdict: the kernel drops what it
// held.
func (h *Holder) serve() {
	for {
		c, err := h.ln.AcceptUnix()
		if err != nil {
			return
		}
		if !rootPeer(c) {
			c.Close()
			continue
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		switch strings.TrimSpace(line) {
		case "release":
			n, err := h.release()
			if err != nil {
				fmt.Fprintf(c, "error %v\n", err)
			} else {
				fmt.Fprintf(c, "released %d\n", n)
			}
			io.Copy(io.Discard, c) // until the asker has removed the table
		case "discard":
			h.mu.Lock()
			n := h.held
			h.mu.Unlock()
			h.Close() // unbound: the kernel drops what the queue holds
			fmt.Fprintf(c, "released %d\n", n)
		default:
			c.Close()
			continue
		}
		c.Close()
		h.Close()
		return
	}
}

// rootPeer says whether the process at the other end of c is root's.
func rootPeer(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	rc.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return err == nil && cred.Uid == 0
}

// watch stops the holder once its lock table is gone (or never came):
// removing a table drops what its queue held, and nobody would release
// it any more. It also stops once nothing but the holder can reach the
// lock's network namespace (no other process in it, no mount of it: a
// node torn down with a lock nobody restored), which the holder's own
// sockets would otherwise keep alive forever.
func (h *Holder) watch() {
	start, seen := time.Now(), false
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-h.done:
			return
		case <-tick.C:
		}
		ok, err := tableExists(h.table, h.netns)
		if err != nil {
			continue
		}
		seen = seen || ok
		if (seen && !ok) || (!seen && time.Since(start) > holderGrace) || (n%8 == 0 && netnsAbandoned(h.netns)) {
			h.Close()
			return
		}
	}
}

// netnsAbandoned says whether no process but this one is in the network
// namespace netns (an fd, or negative for this process's) and no mount
// (ip netns) names it: nobody could restore anything there.
func netnsAbandoned(netns int) bool {
	var st unix.Stat_t
	var err error
	if netns >= 0 {
		err = unix.Fstat(netns, &st)
	} else {
		err = unix.Stat("/proc/self/ns/net", &st)
	}
	if err != nil {
		return false
	}
	name := fmt.Sprintf("net:[%d]", st.Ino)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(b), name) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if e.Name() == self || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == name {
			return false
		}
	}
	return true
}

func tableExists(name string, netns int) (bool, error) {
	c, err := conn(netns)
	if err != nil {
		return false, err
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, err
	}
	for _, t := range ts {
		if t.Name == name {
			return true, nil
		}
	}
	return false, nil
}

// askRelease asks the holder of lock tableName, if there is one, to let
// its packets through (verb "release") or drop them ("discard"). The
// caller removes the table, then calls done (which lets the holder exit).
// held is how many packets were held.
func askRelease(tableName string, netns int, verb string) (held int, done func(), err error) {
	var c *net.UnixConn
	err = sys.InNetns(netns, func() error {
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: controlName(tableName), Net: "unix"})
		return err
	})
	if err != nil {
		return 0, func() {}, nil // no holder: the kernel dropped what the queue got
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, verb+"\n"); err != nil {
		c.Close()
		return 0, func() {}, fmt.Errorf("holder of %s: %w", tableName, err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return 0, func() {}, fmt.Errorf("holder of %s: %w", tableName, err)
	}
	if n, ok := strings.CutPrefix(strings.TrimSpace(line), "released "); ok {
		held, _ = strconv.Atoi(n)
		return held, func() { c.Close() }, nil
	}
	c.Close()
	return 0, func() {}, fmt.Errorf("holder of %s: %s", tableName, strings.TrimSpace(line))
}

// StartHolder binds a queue for lock tableName in the network namespace
// netns (nil: the caller's) and hands it to `exe netlock-hold`, started
// in a session of its own and detached, so that it survives the caller
// (a killing dump is followed by a separate ckpt-redo). The queue socket
// and the control socket are made here and passed down: the lock can be
// taken at once, and what the kernel queues before the holder runs waits
// in the socket. The process is started in the background (its fork and
// exec are not spent while the dump's processes are frozen); started
// says when it is, or why it could not be: then goroutines of the caller
// hold the packets instead, for as long as the caller lives.
func StartHolder(exe, tableName string, netns *os.File) (queue uint16, started <-chan error, err error) {
	nsFD := -1
	var ns *os.File
	if netns != nil {
		if ns, err = dupFile(netns); err != nil {
			return 0, nil, fmt.Errorf("netlock: holder: %w", err)
		}
		nsFD = int(ns.Fd())
	}
	h, err := newHolder(tableName, nsFD)
	if err != nil {
		if ns != nil {
			ns.Close()
		}
		return 0, nil, err
	}
	ch := make(chan error, 1)
	go func() {
		if ns != nil {
			defer ns.Close()
		}
		err := spawnHolder(exe, h, ns)
		if err != nil {
			h.start() // here, for as long as the caller lives
		} else {
			h.Close() // our copies: the holder process has its own
		}
		ch <- err
	}()
	return h.Queue, ch, nil
}

// spawnHolder starts `exe netlock-hold TABLE QUEUE NETNS` with h's queue
// socket (fd 3) and control socket (fd 4), and the network namespace
// netns (fd 5, if not nil).
func spawnHolder(exe string, h *Holder, netns *os.File) error {
	ln, err := h.ln.File()
	if err != nil {
		return fmt.Errorf("netlock: holder: %w", err)
	}
	defer ln.Close()
	cmd := exec.Command(exe, HoldCommand, h.table, strconv.Itoa(int(h.Queue)), "-1")
	cmd.ExtraFiles = []*os.File{h.q.f, ln}
	if netns != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, netns)
		cmd.Args[len(cmd.Args)-1] = "5"
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("netlock: start holder: %w", err)
	}
	go cmd.Wait() // reaped if the caller lives on (an agent)
	return nil
}

// closeInherited closes the fds above last that this process inherited
// without close-on-exec (a pipe of whoever ran the dump, say): a holder
// lives on, and must not keep them open (a shell would wait for the end
// of such a pipe). The runtime's own fds are all close-on-exec.
func closeInherited(last int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= last {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			inherited, _ := sys.NewFD(fd) // nothing else here owns it
			inherited.Close()
		}
	}
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// RunHolder is the holder process's side (HoldCommand TABLE QUEUE
// NETNS): it holds the packets of lock tableName queued to the queue
// socket it got as fd 3 (bound to queue), answering on the control socket
// of fd 4, in the network namespace of fd nsArg ("-1": its own), and
// returns once released or once its lock is gone.
func RunHolder(tableName, queue, nsArg string) error {
	netns, err := strconv.Atoi(nsArg)
	if err != nil {
		return fmt.Errorf("netlock holder: network namespace %q: %w", nsArg, err)
	}
	closeInherited(5)
	num, err := strconv.ParseUint(queue, 10, 16)
	if err != nil {
		return fmt.Errorf("netlock holder: queue %q: %w", queue, err)
	}
	l, err := net.FileListener(os.NewFile(4, "control"))
	if err != nil {
		return fmt.Errorf("netlock holder: control socket: %w", err)
	}
	ln, ok := l.(*net.UnixListener)
	if !ok {
		return fmt.Errorf("netlock holder: fd 4 is not a UNIX listener")
	}
	h := &Holder{Queue: uint16(num), table: tableName, netns: netns, done: make(chan struct{}),
		q: &nfqueue{f: os.NewFile(3, "nfnetlink"), num: uint16(num)}, ln: ln}
	h.start()
	<-h.Done()
	return nil
}
