package fdkind

import (
	"os"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/bpftask"
	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

// DumpEnv is what the dump of a tree offers the kinds.
type DumpEnv interface {
	// AddData stores bytes in a FileData record and returns its ID.
	AddData(b []byte) int
	// Ghost stores the content of a deleted file once per inode
	// (ReadGhost) and marks ref deleted, with its data record.
	Ghost(path string, st *unix.Stat_t, ref *image.FileRef) error
	// Socket returns ckpt's copy of a socket fd of the tree, taken when
	// the tree was frozen.
	Socket(pid sys.PID, fd sys.TargetFD) (int, bool)
	// Sockets is the tree's socket state the socket kinds use.
	Sockets() SocketDumpEnv
	// InDump tells whether pid is a live process of the dump.
	InDump(pid sys.PID) bool
	// InFlight names a file in flight in a UNIX socket's queue (fd is
	// ckpt's copy, which the caller closes): a UNIX socket by its inode
	// (described once, if no process of the dump holds it), any other
	// description as the same File as the tree's fds of it, or described
	// now. Files it cannot restore are refused (ErrUnsupported).
	InFlight(fd int) (image.InFlight, error)
}

// SocketDumpEnv is the dump's view of the tree's sockets.
type SocketDumpEnv interface {
	// UnixSockets is sock_diag's view of the tree's UNIX sockets.
	UnixSockets() (map[uint32]sockets.UnixInfo, error)
	// InTree tells whether a UNIX socket inode belongs to the tree.
	InTree(ino uint32) bool
	// Reuse is the SO_REUSEADDR of a connection ckpt put in repair mode.
	Reuse(fd int) int
	// Dumped records a connection whose queues were read: it goes back
	// to repair mode just before the processes are killed.
	Dumped(fd int)
	// Defaults is what every socket of the dump is compared with (the
	// options of new sockets, the machine's addresses), read once.
	Defaults() *sockets.Defaults
	// SkipInFlight tells whether the user gave --skip-in-flight: TCP
	// connections waiting in a listener's accept queue are dropped
	// instead of refused.
	SkipInFlight() bool
	// ExternalUnix tells whether the UNIX socket ino, connected to a
	// socket outside the dump, may be saved as external (--external
	// unix or unix:INO).
	ExternalUnix(ino uint32) bool
	// Member tells whether pid is a live process (not a zombie) of the
	// dumped tree.
	Member(pid sys.PID) bool
	// Peeked gives, once, the messages the dump already read from the
	// queue of the UNIX socket ino (sockets.PeekUnix) while it looked for
	// sockets in flight; ok is false if it read none.
	Peeked(ino uint32) (msgs []sockets.UnixMsg, ok bool)
	// Waiting reads the connections waiting in the accept queue of the
	// UNIX listener ino from the kernel, once (bpftask.UnixReader).
	Waiting(ino uint32) ([]bpftask.UnixConn, error)
	// UnixPieces reads the pieces queued in the UNIX stream socket ino
	// from the kernel (bpftask.UnixReader.Pieces): where a piece with
	// files in flight starts, which a peek cannot tell.
	UnixPieces(ino uint32) ([]bpftask.UnixPiece, error)
	// PortBound tells whether the program bound the port of the TCP
	// socket fd (a copy in ckpt) itself (SOCK_BINDPORT_LOCK, read with
	// bpftask.TCPReader); ok is false when the kernel cannot tell.
	PortBound(fd int) (bound, ok bool, err error)
	// SockState reads the socket layer state (sockets.SockConnecting...)
	// of the TCP socket fd (a copy in ckpt) in state (tcp_info) with
	// shutdown (Socket.Shutdown) where the restore needs it
	// (sockets.SockStateNeeded); 0 where it does not. An error wrapping
	// ErrUnsupported says it cannot be read.
	SockState(fd, state, shutdown int) (uint8, error)
	// Hidden reads what the kernel keeps of the INET socket fd (a copy
	// in ckpt) and no getsockopt gives (bpftask.SockReader): it sets
	// s.Joined, the multicast groups it joined, or refuses (an error
	// wrapping sockets.ErrState, naming it) a program of its
	// SO_REUSEPORT group, a per-socket IPsec policy, a SYN saved by
	// TCP_SAVE_SYN, or such state it cannot read.
	Hidden(fd int, s *image.Socket) error
}

// RestoreEnv is what the restore of a tree offers the kinds.
type RestoreEnv interface {
	// Data returns the bytes of a FileData record.
	Data(id int) ([]byte, error)
	// Once builds the object known by key the first time it is asked
	// for, and returns the same object every time after: one pipe for
	// both of its ends, one unnamed file for every fd and mapping of a
	// deleted file.
	Once(key any, build func() (any, error)) (any, error)
	// Keep hands f to the restore, which closes it at the end.
	Keep(f *os.File)
	// InDump tells whether pid is a process or a thread of the image.
	InDump(pid sys.PID) bool
	// SameBoot tells whether the restore runs on the machine of the dump,
	// not rebooted since: device and inode numbers and change times of
	// files can be compared.
	SameBoot() bool
	// ShellJob tells whether the user gave --shell-job.
	ShellJob() bool
	// Stdio opens the --stdio replacement; ok is false without it.
	Stdio() (f *os.File, ok bool, err error)
	// Sockets is the tree's socket state the socket kinds use.
	Sockets() SocketRestoreEnv
	// BeforeBuild runs fn once every process of the tree exists (held
	// stopped, memory written) and before any is built (fds, creds):
	// target gives a process of the tree in which to run system calls
	// (a UNIX socket pair made by the process that made it at the dump).
	// Descriptions opened by fn reach the processes through
	// Desc.InTarget.
	BeforeBuild(fn func(target func(pid sys.PID) (Target, bool)) error)
	// File returns ckpt-redo's copy of the description with File ID id,
	// opened now if no fd uses it (a file in flight in a UNIX socket's
	// queue). It is called in BeforeBuild steps, once every description
	// is opened.
	File(id int) (*os.File, error)
}

// SocketRestoreEnv is the restore's view of the tree's sockets.
type SocketRestoreEnv interface {
	// Rules are the rewrite rules (nil for none).
	Rules() *rewrite.Rules
	// Peer finds the UNIX socket of the image with inode ino.
	Peer(ino uint32) *image.File
	// Named lists the UNIX sockets of the image bound to name (a path or
	// "@abstract"; accepted connections bear their listener's).
	Named(name string) []*image.File
	// Repairing hands over a TCP connection built in repair mode: it is
	// taken out once every process is built.
	Repairing(f *os.File, s *image.Socket, sendQ []byte)
	// SYNsDropped tells that a network lock of the restore drops the
	// packets marked sockets.DropMark (the SYN, and the answer to the
	// forged SYN-ACK, of a socket whose rebuild connects for real:
	// sockets.NeedsSYNDropped), which then needs no lock of its own.
	SYNsDropped() bool
	// Finally runs fn once every socket of the tree is built (before
	// connections leave repair mode), or when the restore fails; the
	// functions run in the reverse order of the calls (as deferred
	// calls): a temporary SO_REUSEPORT cleared, the file of a deleted
	// UNIX socket name removed again.
	Finally(fn func() error)
}

// Target is a process being restored, stopped, in which ckpt-redo runs
// system calls.
type Target interface {
	// PID of the process.
	PID() sys.PID
	// Call runs a system call in the process; name is for errors.
	Call(name string, nr uint64, args ...uint64) (uint64, error)
	// Scratch copies data into scratch memory of the process and returns
	// its address there; the next call to Scratch may overwrite it.
	Scratch(data []byte) (uint64, error)
	// Passed returns the fd under which the process holds ckpt-redo's
	// copy of a description (File ID) until its fds are settled.
	Passed(fileID int) (sys.TargetFD, bool)
	// HoldPID runs fn while a short-lived child of the process holds PID
	// pid (to open the /proc files of a process that had exited).
	HoldPID(pid sys.PID, fn func() error) error
	// HoldPIDIn runs fn with the short-lived child of the process that
	// holds PID pid as its target (a copy of the process, still root):
	// system calls made as the process pid (a UNIX listener that had
	// called listen() in a process that has exited).
	HoldPIDIn(pid sys.PID, fn func(held Target) error) error
}
