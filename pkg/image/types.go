package image

import (
	"time"

	"github.com/ckpt/ckpt/internal/sys"
)

// Header is the metadata of the first record: what wrote the image, from
// what, and on which machine. Restore checks it before creating anything.
type Header struct {
	Tool         string    `json:"tool"`
	Created      time.Time `json:"created"`
	Kernel       string    `json:"kernel"`  // uname release
	Machine      string    `json:"machine"` // uname machine, e.g. x86_64
	Hostname     string    `json:"hostname"`
	Root         sys.PID   `json:"root"` // PID of the dumped root process
	Processes    int       `json:"processes"`
	LeaveRunning bool      `json:"leave_running,omitempty"`
	// NetLock names the network lock (an nftables table) that keeps the
	// dumped TCP connections silent until they are restored.
	NetLock string `json:"net_lock,omitempty"`
	CPU     CPU    `json:"cpu"`
	VDSO    VDSO   `json:"vdso"`
	// ExternalIDs are the sessions and process groups of the tree led by
	// processes outside the dump (accepted with --shell-job): their
	// members are restored into ckpt-redo's own session and group. Any
	// other session or group whose leader is not in the image had no
	// leader left: a helper process takes its PID at restore.
	ExternalIDs []sys.PID `json:"external_ids,omitempty"`
	// BootID is the kernel's boot_id at the dump: a restore under the
	// same one is on the same machine, where device and inode numbers
	// and change times of files still mean the same.
	BootID string `json:"boot_id,omitempty"`
	// SysVMsg are the System V message queues the tree sent to or
	// received from last, with their messages.
	SysVMsg []SysVMsgQueue `json:"sysv_msg,omitempty"`
	// SysVSem are the System V semaphore sets the tree operated on last,
	// none of its processes having SEM_UNDO operations.
	SysVSem []SysVSemSet `json:"sysv_sem,omitempty"`
}

// SysVSemSet is a System V semaphore set as semctl shows it: IPC_STAT
// (key, times), GETALL (the values) and GETPID of each semaphore (the
// process that operated on it last).
type SysVSemSet struct {
	ID     int      `json:"id"`
	Key    int32    `json:"key"`
	OTime  int64    `json:"otime,omitempty"`
	CTime  int64    `json:"ctime"`
	Values []uint16 `json:"values"`
	PIDs   []int32  `json:"pids"`
}

// SysVMsgQueue is a System V message queue as msgctl(IPC_STAT) shows it,
// with the messages it held (read with MSG_COPY, left in place).
type SysVMsgQueue struct {
	Key    int32  `json:"key"`
	ID     int    `json:"id"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	CUID   uint32 `json:"cuid"`
	CGID   uint32 `json:"cgid"`
	QBytes uint64 `json:"qbytes"`
	// LSPID and LRPID are the processes that sent and received last (0:
	// none); STime, RTime and CTime the times of the last send, receive
	// and change, in seconds.
	LSPID    sys.PID   `json:"lspid,omitempty"`
	LRPID    sys.PID   `json:"lrpid,omitempty"`
	STime    int64     `json:"stime,omitempty"`
	RTime    int64     `json:"rtime,omitempty"`
	CTime    int64     `json:"ctime,omitempty"`
	Messages []SysVMsg `json:"messages,omitempty"`
}

// SysVMsg is one message of a queue: its type and text.
type SysVMsg struct {
	Type int64  `json:"type"`
	Text []byte `json:"text,omitempty"`
}

// CPU describes the processor features the dumped processes could use.
type CPU struct {
	Vendor    string   `json:"vendor"`
	Model     string   `json:"model"`
	XCR0      uint64   `json:"xcr0"`       // enabled xsave features
	XSaveSize int      `json:"xsave_size"` // NT_X86_XSTATE size
	Flags     []string `json:"flags"`      // /proc/cpuinfo flags
}

// VDSO identifies the kernel's vDSO: a restored process keeps calling into
// the vDSO it was dumped with, so the restoring kernel must have the same.
type VDSO struct {
	Size   uint64 `json:"size"`
	SHA256 string `json:"sha256"`
}

// Process is everything about one process except its memory pages.
type Process struct {
	PID     sys.PID `json:"pid"`
	PPID    sys.PID `json:"ppid"`
	PGID    sys.PID `json:"pgid"`
	SID     sys.PID `json:"sid"`
	Comm    string  `json:"comm"`
	Exe     string  `json:"exe"`
	Cmdline string  `json:"cmdline"` // for people; the real one is in memory
	// LockFuture holds the mlockall(2) flags in effect for future
	// mappings (MCL_FUTURE, MCL_ONFAULT), 0 if none.
	LockFuture int `json:"lock_future,omitempty"`

	// FilesOf is the PID of the parent whose file descriptor table the
	// process shares (clone CLONE_FILES without CLONE_THREAD), 0 if its
	// table is its own: it is made again with CLONE_FILES from that
	// parent, and its FDs are the parent's.
	FilesOf sys.PID `json:"files_of,omitempty"`

	// VforkOf is, for a vfork() child that had not called exec or exited
	// yet, the PID of its parent, which waits in vfork() for it: the
	// child runs in the parent's memory (the image holds it once, with
	// the parent: the child has no VMAs, MM, auxv or pages of its own),
	// and the parent's one thread is inside the vfork system call (its
	// registers those of the call: orig_rax 58). The restore makes the
	// child again with vfork() from the rebuilt parent. 0 otherwise.
	VforkOf sys.PID `json:"vfork_of,omitempty"`

	// Zombie marks a child that had exited and was not reaped yet: only
	// the IDs above and ExitStatus (a wait status) are set.
	Zombie     bool `json:"zombie,omitempty"`
	ExitStatus int  `json:"exit_status,omitempty"`

	// LeaderExited marks a process whose thread-group leader had exited
	// (pthread_exit or the exit system call in its main thread) while
	// other threads ran on: the leader is a zombie thread, seen in
	// /proc/PID/task/PID in state Z until the process ends. Threads[0]
	// then holds what the zombie leader still shows (its TID, name,
	// signal mask, credentials and scheduling); its registers are a
	// copy of another thread's, for the restore to build it with. The
	// restore makes the leader exit (the exit system call, with
	// LeaderExitCode) once the process is built.
	LeaderExited bool `json:"leader_exited,omitempty"`
	// LeaderExitCode is the exit code of the dead leader as its stat
	// shows it (the status the exit system call took, shifted left 8).
	LeaderExitCode int `json:"leader_exit_code,omitempty"`

	MM      MM       `json:"mm"`
	Auxv    []uint64 `json:"auxv"`
	VMAs    []VMA    `json:"vmas"`
	Threads []Thread `json:"threads"`
	// Files are the open file descriptions this process is the first in
	// the image to use. File IDs are unique in the image, and FDs of any
	// process may refer to files listed by another one (shared).
	Files   []File    `json:"files"`
	FDs     []FD      `json:"fds"`
	Signals Signals   `json:"signals"`
	Timers  Timers    `json:"timers"`
	Rlimits []Rlimit  `json:"rlimits"`
	Creds   Creds     `json:"creds"`
	Misc    ProcMisc  `json:"misc"`
	Mapped  []FileRef `json:"mapped_files"` // files behind file-backed VMAs, indexed by VMA.File
}

// MM holds the fields of the mm that PR_SET_MM_MAP restores.
type MM struct {
	StartCode  uint64 `json:"start_code"`
	EndCode    uint64 `json:"end_code"`
	StartData  uint64 `json:"start_data"`
	EndData    uint64 `json:"end_data"`
	StartBrk   uint64 `json:"start_brk"`
	Brk        uint64 `json:"brk"`
	StartStack uint64 `json:"start_stack"`
	ArgStart   uint64 `json:"arg_start"`
	ArgEnd     uint64 `json:"arg_end"`
	EnvStart   uint64 `json:"env_start"`
	EnvEnd     uint64 `json:"env_end"`
}

// VMAKind says what a VMA is.
type VMAKind string

// VMA kinds.
const (
	VMAAnon       VMAKind = "anon"    // anonymous private (incl. heap, stack)
	VMAShmAnon    VMAKind = "shm"     // anonymous shared
	VMASysVShm    VMAKind = "sysvshm" // a System V shared memory attachment (shmat)
	VMAFile       VMAKind = "file"    // backed by a file in Process.Mapped
	VMAVDSO       VMAKind = "vdso"    // [vdso]
	VMAVvar       VMAKind = "vvar"    // [vvar], [vvar_vclock]
	VMAVsyscall   VMAKind = "vsyscall"
	VMAHeap       VMAKind = "heap"
	VMAStack      VMAKind = "stack"
	VMAGuardOrDev VMAKind = "other"
	VMAAIO        VMAKind = "aio" // an AIO context's ring (io_setup); see AIO
)

// VMA is one memory mapping.
type VMA struct {
	Start  uint64  `json:"start"`
	End    uint64  `json:"end"`
	Prot   int     `json:"prot"`   // PROT_READ|PROT_WRITE|PROT_EXEC
	Shared bool    `json:"shared"` // MAP_SHARED
	Kind   VMAKind `json:"kind"`
	Name   string  `json:"name,omitempty"` // path or [heap], [stack], ...
	Offset uint64  `json:"offset,omitempty"`
	File   int     `json:"file"` // index into Process.Mapped, -1 for none
	// GrowsDown marks a stack that the kernel extends downwards.
	GrowsDown bool `json:"grows_down,omitempty"`
	// Advice lists the madvise(2) advice values in effect on the VMA
	// (MADV_HUGEPAGE, MADV_DONTFORK, MADV_DONTDUMP, ...).
	Advice []int `json:"advice,omitempty"`
	// Pages counts the pages stored for this VMA (zero pages included).
	Pages int `json:"pages"`
	// ParentPages counts those of Pages that are the parent's own frames,
	// shared copy-on-write since a fork and written by neither (PageRun
	// Parent). A VMA holding them is inherited from the restored parent
	// over fork instead of being mapped anew (see Inherits).
	ParentPages int `json:"parent_pages,omitempty"`
	// ShmID names the shared memory object behind a VMAShmAnon mapping;
	// mappings with the same ShmID share it. Its pages are stored with the
	// first mapping of each range. ShmSize is the object's size.
	ShmID   uint64 `json:"shm_id,omitempty"`
	ShmSize int64  `json:"shm_size,omitempty"`
	// Locked is mlock(2) (VmFlags lo), LockOnFault mlock2(MLOCK_ONFAULT)
	// (lf), Sealed mseal(2) (sl).
	Locked      bool `json:"locked,omitempty"`
	LockOnFault bool `json:"lock_on_fault,omitempty"`
	Sealed      bool `json:"sealed,omitempty"`
	// NoReserve is MAP_NORESERVE (VmFlags nr): no swap space reserved, the
	// mapping not counted against the overcommit limit.
	NoReserve bool `json:"no_reserve,omitempty"`
	// SysV describes the segment a VMASysVShm mapping attaches.
	SysV *SysVShm `json:"sysv,omitempty"`
	// AIO is the ring of a VMAAIO mapping.
	AIO *AIORing `json:"aio,omitempty"`
	// HugePageSize is the huge page size in bytes of a private anonymous
	// hugetlb mapping (MAP_HUGETLB), 0 for ordinary memory.
	HugePageSize uint64 `json:"huge_page_size,omitempty"`
	// MemPolicy is the mapping's own NUMA memory policy (mbind), nil for
	// none (the thread's policy applies).
	MemPolicy *MemPolicy `json:"mem_policy,omitempty"`
}

// AIORing is an AIO context (io_setup) as its ring shows it: the number
// of events it holds, where the program reads next (Head) and where the
// kernel writes the next completion (Tail), and the completions not yet
// reaped, from Head to Tail (struct io_event, 32 bytes each).
type AIORing struct {
	Nr     uint32 `json:"nr"`
	Head   uint32 `json:"head"`
	Tail   uint32 `json:"tail"`
	Events []byte `json:"events,omitempty"`
}

// SysVShm is a System V shared memory segment as /proc/sysvipc/shm shows
// it. Its content is stored as the pages of the attachments (like
// VMAShmAnon, ShmID being the segment id).
type SysVShm struct {
	Key  int32  `json:"key"`
	ID   int    `json:"id"`
	Mode uint32 `json:"mode"` // permissions, SHM_DEST, SHM_LOCKED
	Size uint64 `json:"size"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	CUID uint32 `json:"cuid"`
	CGID uint32 `json:"cgid"`
	// ReadOnly marks an attachment made with SHM_RDONLY (of the VMA
	// holding this description).
	ReadOnly bool `json:"read_only,omitempty"`
	// HugePageSize is the huge page size in bytes of a segment made with
	// SHM_HUGETLB (UCX's shared memory, when huge pages are free), 0 for
	// an ordinary one.
	HugePageSize uint64 `json:"huge_page_size,omitempty"`
}

// Len is the VMA's size in bytes.
func (v *VMA) Len() uint64 { return v.End - v.Start }

// FileRef identifies a file as it was at dump time, so that restore can
// tell whether it changed.
type FileRef struct {
	Path    string `json:"path"`
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	Mode    uint32 `json:"mode"`
	UID     int    `json:"uid,omitempty"`
	GID     int    `json:"gid,omitempty"`
	// CtimeNs is the inode's change time, compared only on the machine
	// of the dump (Header.BootID).
	CtimeNs int64 `json:"ctime_ns,omitempty"`
	// BuildID (hex) or SHA256 (hex, of the whole content) identify the
	// content of a file mapped privately, whose clean pages the restore
	// reads back from the file: an ELF file's GNU build-id, any other
	// file's hash.
	BuildID string `json:"build_id,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	// Hashed are the ranges of the file SHA256 covers, back to back (the
	// parts mapped privately); none: the whole file.
	Hashed []Extent `json:"hashed,omitempty"`
	// Deleted files (unlinked while open or mapped) have their content in a
	// FileData record with this ID: the bytes of Extents back to back
	// (holes are not stored), or the whole file when Extents is empty.
	Deleted bool `json:"deleted,omitempty"`
	// ProcGone is the PID of the process whose /proc directory Path is
	// in, when that process had exited at the dump (the file then tells
	// only ESRCH): it is opened again through a short-lived process
	// holding that PID.
	ProcGone sys.PID  `json:"proc_gone,omitempty"`
	DataID   int      `json:"data_id,omitempty"`
	Extents  []Extent `json:"extents,omitempty"`
	// Seals are a deleted memfd's F_GET_SEALS.
	Seals int `json:"seals,omitempty"`
	// Handle is set for a file whose name Path was removed while it
	// still has other links (st_nlink > 0): it is not recreated but
	// opened again by this file handle (name_to_handle_at), on the file
	// system of Path's directory.
	Handle *FileHandle `json:"handle,omitempty"`
}

// FileHandle is a file handle of name_to_handle_at(2).
type FileHandle struct {
	Type  int32  `json:"type"`
	Bytes []byte `json:"bytes"`
}

// Extent is a range of a file that holds data.
type Extent struct {
	Off int64 `json:"off"`
	Len int64 `json:"len"`
}

// FileKind says what an open file description is.
type FileKind string

// File kinds.
const (
	FileRegular FileKind = "reg"
	FileDir     FileKind = "dir"
	FileChar    FileKind = "chr" // /dev/null, /dev/zero, /dev/urandom, ...
	FileTTY     FileKind = "tty"
	FilePtmx    FileKind = "ptmx" // the master side of a pseudo-terminal
	FilePipe    FileKind = "pipe"
	FileFIFO    FileKind = "fifo"
	FileEventfd FileKind = "eventfd"
	FileTimerfd FileKind = "timerfd"
	FileSigfd   FileKind = "signalfd"
	FileEpoll   FileKind = "epoll"
	FilePidfd   FileKind = "pidfd"
	FileInotify FileKind = "inotify"
	// FileFanotify is a fanotify group with its marks.
	FileFanotify FileKind = "fanotify"
	FileSocket   FileKind = "socket"
	FileSymlink  FileKind = "symlink" // an O_PATH fd of a symbolic link
	// FileNS is an open namespace file (/proc/PID/ns/TYPE).
	FileNS FileKind = "ns"
)

// Socket is a TCP or UDP socket (IPv4 or IPv6).
type Socket struct {
	Family   int    `json:"family"`
	Type     int    `json:"type"`
	Protocol int    `json:"protocol"`
	State    int    `json:"state,omitempty"` // TCP state (tcp_info)
	Local    string `json:"local,omitempty"` // address:port
	Remote   string `json:"remote,omitempty"`
	Backlog  int    `json:"backlog,omitempty"` // listening sockets
	// FreeBind is set when the local address is none of the machine's
	// (bound with IP_FREEBIND or IP_TRANSPARENT): the restore binds with
	// IP_FREEBIND, then sets the saved value back.
	FreeBind bool `json:"free_bind,omitempty"`
	// PortShared is set on a TCP listener whose address and port another
	// listener had too (an SO_REUSEPORT group): the restore binds and
	// listens with SO_REUSEPORT on, and sets the saved value once every
	// socket is built.
	PortShared bool `json:"port_shared,omitempty"`
	// Options are the socket options that differ from a new socket's
	// (pkg/sockets.Options lists them), Linger SO_LINGER (on, seconds) of
	// older images.
	Options []SockOpt `json:"options,omitempty"`
	Linger  [2]int32  `json:"linger,omitempty"`
	// Shutdown is what shutdown() closed (SHUT_RD 1, SHUT_WR 2, both 3).
	Shutdown int `json:"shutdown,omitempty"`
	// PortFree is set on a TCP socket in state CLOSE whose getsockname
	// port is not held by it (given back when its connection ended).
	PortFree bool `json:"port_free,omitempty"`
	// PeerClosed is set on a connected UNIX socket whose peer was closed.
	PeerClosed bool `json:"peer_closed,omitempty"`
	// PeerReset is set when the closed peer left ECONNRESET pending (it
	// had data unread).
	PeerReset bool `json:"peer_reset,omitempty"`
	// TCP is the state of a connection, read in repair mode (or, for a
	// socket in state CLOSE closed after a connection, what rebuilding it
	// needs); its receive and send queues are in FileData records.
	TCP        *TCPRepair `json:"tcp,omitempty"`
	RecvDataID int        `json:"recv_data_id,omitempty"`
	SendDataID int        `json:"send_data_id,omitempty"`
	// A UNIX socket connected to another one of the dump: their inodes,
	// and its receive queue, one FileData record per message (a stream's
	// bytes are one message).
	Ino      uint32 `json:"ino,omitempty"`
	Peer     uint32 `json:"peer,omitempty"`
	RecvMsgs []int  `json:"recv_msgs,omitempty"`
	// RecvFrom are the names of the senders of RecvMsgs, when one of
	// them has a name (a datagram socket receiving from several).
	RecvFrom []string `json:"recv_from,omitempty"`
	// RecvRights are, on a UNIX socket, the files in flight attached to
	// each message of RecvMsgs (SCM_RIGHTS, same index; nil: none), and
	// RecvCreds the credentials each carries (SCM_CREDENTIALS: the
	// sender's pid, uid and gid; Groups unused).
	RecvRights [][]InFlight `json:"recv_rights,omitempty"`
	RecvCreds  []PeerCred   `json:"recv_creds,omitempty"`
	// RecvTo are the destinations of the datagrams queued in a UDP
	// socket (RecvFrom their sources).
	RecvTo []string `json:"recv_to,omitempty"`
	// AcceptQueue are the inodes of the clients whose connections wait in
	// a UNIX listener's accept queue, in order; AcceptOf is, on such a
	// client, the listener's inode.
	AcceptQueue []uint32 `json:"accept_queue,omitempty"`
	AcceptOf    uint32   `json:"accept_of,omitempty"`
	// Waiting is, on such a client that had sent data, what the server
	// end of its connection (not accepted yet) holds; Orphans are, on a
	// listener, those of the connections waiting in its queue whose
	// client was closed, in the order of the 0s in AcceptQueue.
	Waiting *Waiting  `json:"waiting,omitempty"`
	Orphans []Waiting `json:"orphans,omitempty"`
	// Accepted are, on a UNIX listener, the inodes of the connections of
	// the dump it accepted (they bear its name); AcceptedFrom is, on such
	// a connection, the listener's inode.
	Accepted     []uint32 `json:"accepted,omitempty"`
	AcceptedFrom uint32   `json:"accepted_from,omitempty"`
	// ConnectedTo is, on a UNIX datagram socket connected one way to a
	// socket of the dump, that socket's inode; ConnectedFrom are, on
	// the latter, the inodes of such sockets.
	ConnectedTo   uint32   `json:"connected_to,omitempty"`
	ConnectedFrom []uint32 `json:"connected_from,omitempty"`
	// External is set on a UNIX socket connected to a socket of a
	// process outside the dump (ckpt dump --external); ExternalPeer is
	// that socket's name ("" unnamed): the restore connects to it again,
	// unless ckpt-redo --inherit-fd gives the fd.
	External     bool   `json:"external,omitempty"`
	ExternalPeer string `json:"external_peer,omitempty"`
	// File is, on a UNIX socket bound to a path name, the socket file the
	// bind made (pkg/sockets sockfile.go).
	File *SockFile `json:"sock_file,omitempty"`
	// Joined are the multicast groups an INET datagram or raw socket
	// joined, with their source filters, newest first as the kernel
	// keeps them (pkg/sockets multicast.go).
	Joined []Membership `json:"joined,omitempty"`
	// PeerCred is, on an unnamed pair of connected UNIX sockets
	// (socketpair), what SO_PEERCRED said: the process that made the
	// pair and its effective ids then. The restore makes the pair in
	// that process, with those ids.
	PeerCred *PeerCred `json:"peer_cred,omitempty"`
	// Creds is what SO_PEERCRED said of a UNIX socket connected through
	// a name or listening: on a listener, the process that called
	// listen() and its ids then; on a stream or seqpacket connection's
	// accepted end, the process that called connect(); on its other end,
	// the one that had called listen() on the listener. The restore
	// listens and connects in those processes, with those ids.
	Creds *PeerCred `json:"creds,omitempty"`
	// Connector is, on a client waiting in a UNIX listener's accept
	// queue, the process taken for the one that connected (the end the
	// listener will accept names it): the process of the dump that held
	// the client, with its effective ids and groups then.
	Connector *PeerCred `json:"connector,omitempty"`
	// Ifindex and LinkProto are a packet socket's bound interface and
	// protocol (network byte order, as sockaddr_ll has it).
	Ifindex   int `json:"ifindex,omitempty"`
	LinkProto int `json:"link_proto,omitempty"`
	// Memberships, Fanout, RxRing and TxRing are a packet socket's
	// PACKET_ADD_MEMBERSHIP entries, PACKET_FANOUT value (group id, type
	// and flags) and mmap rings (struct tpacket_req3), empty when saved.
	Memberships []PacketMember `json:"memberships,omitempty"`
	Fanout      int            `json:"fanout,omitempty"`
	RxRing      []uint32       `json:"rx_ring,omitempty"`
	TxRing      []uint32       `json:"tx_ring,omitempty"`
	// PortID, Groups, DstPortID and DstGroup are a netlink socket's
	// bound port id and multicast groups, and the address it is
	// connected to.
	PortID    uint32   `json:"port_id,omitempty"`
	Groups    []uint32 `json:"groups,omitempty"`
	DstPortID uint32   `json:"dst_port_id,omitempty"`
	DstGroup  uint32   `json:"dst_group,omitempty"`
}

// Waiting is what the server end of a connection waiting in a UNIX
// listener's accept queue holds, read from the kernel at the dump: the
// pieces its client sent (FileData records, in the pieces the kernel
// queued them) with the credentials each carries, and the process and
// ids SO_PEERCRED will show on the accepted end.
type Waiting struct {
	Msgs      []int      `json:"msgs,omitempty"`
	Creds     []PeerCred `json:"creds,omitempty"`
	Connector *PeerCred  `json:"connector,omitempty"`
	// Name is, for a closed client, the name it was bound to ("@..."
	// abstract): getpeername on the accepted end gives it.
	Name string `json:"name,omitempty"`
	// Rights are the files in flight attached to each of Msgs
	// (SCM_RIGHTS, same index; empty if none has any).
	Rights [][]InFlight `json:"rights,omitempty"`
}

// InFlight is a file in flight in a UNIX socket's queue: a UNIX socket
// by its inode (Sock, the socket of the image with that Ino), or another
// open file description by its File ID.
type InFlight struct {
	Sock uint32 `json:"sock,omitempty"`
	File int    `json:"file"`
}

// SockFile is the file a UNIX socket bound to a path name made: its
// owner and permissions, where a relative name lies, whether it is gone.
type SockFile struct {
	// Dir is, for a relative name, the directory it was found in (the
	// process's working directory): the restore binds there.
	Dir  string `json:"dir,omitempty"`
	Mode uint32 `json:"mode"` // permission bits
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	// Gone is set when the name no longer leads to the socket (unlinked,
	// or another file took its place): the restore binds, then removes
	// the file again. MissingDirs is how many of its last directories
	// were gone too: made for the bind, removed after.
	Gone        bool `json:"gone,omitempty"`
	MissingDirs int  `json:"missing_dirs,omitempty"`
}

// PacketMember is a packet socket's membership (PACKET_ADD_MEMBERSHIP),
// added Count times.
type PacketMember struct {
	Ifindex int    `json:"ifindex"`
	Type    int    `json:"type"` // PACKET_MR_*
	Addr    []byte `json:"addr,omitempty"`
	Count   int    `json:"count"`
}

// PeerCred is a UNIX socket's SO_PEERCRED and SO_PEERGROUPS: process,
// effective user and group, supplementary groups.
type PeerCred struct {
	PID sys.PID `json:"pid"`
	UID uint32  `json:"uid"`
	GID uint32  `json:"gid"`
	// Groups are its supplementary groups (SO_PEERGROUPS).
	Groups []uint32 `json:"groups,omitempty"`
}

// SockOpt is a socket option: an integer Value, or the bytes getsockopt
// gave (a name, a struct, a filter program).
type SockOpt struct {
	Level int    `json:"level"`
	Name  int    `json:"name"`
	Value int    `json:"value"`
	Bytes []byte `json:"bytes,omitempty"`
}

// TCPRepair is what TCP_REPAIR reads from a connection (Socket.State is
// its TCP state: established, SYN_SENT or one of a close). SndSeq and
// RcvSeq are the kernel's: they count a FIN sent or received.
type TCPRepair struct {
	SndSeq    uint32    `json:"snd_seq"` // after the send queue
	RcvSeq    uint32    `json:"rcv_seq"` // after the receive queue
	MSS       int       `json:"mss"`
	Options   uint8     `json:"options"` // TCPI_OPT_*
	SndWscale uint8     `json:"snd_wscale"`
	RcvWscale uint8     `json:"rcv_wscale"`
	Timestamp uint32    `json:"timestamp"`
	Window    [5]uint32 `json:"window"` // struct tcp_repair_window
	Unsent    int       `json:"unsent"` // bytes at the end of the send queue never sent
	// ReuseAddr is SO_REUSEADDR, which leaving repair mode clears.
	ReuseAddr int `json:"reuseaddr,omitempty"`
	// FinUnsent is set when our FIN had not been sent yet (it waits
	// behind the unsent data, or for the peer's window).
	FinUnsent bool `json:"fin_unsent,omitempty"`
	// Connecting is set on a socket in state CLOSE whose connect failed
	// before any connection (refused, timed out) while no connect() call
	// waited for it: the socket layer still calls it connecting (or, if
	// SockState says so, disconnecting).
	Connecting bool `json:"connecting,omitempty"`
	// SockState is the socket layer's state of the socket (struct
	// socket.state, read by the dump: 2 SS_CONNECTING, a connect() that
	// was non-blocking and never called again; 3 SS_CONNECTED; 4
	// SS_DISCONNECTING, shut down while connecting). 0: not read (an
	// image from before it was): connected, or connecting for a closed
	// socket with Connecting.
	SockState uint8 `json:"sock_state,omitempty"`
	// PortBound says whether the program bound the connection's port
	// (SOCK_BINDPORT_LOCK: it keeps the port when the connection ends)
	// or connect chose it (given back); nil when the dump could not read
	// it (no BPF TCP reader), and the restore guesses from
	// ip_local_port_range.
	PortBound *bool `json:"port_bound,omitempty"`
}

// EventFile is the state of an event file: eventfd, timerfd, signalfd,
// epoll, pidfd or inotify; the fields that apply to its kind are set.
type EventFile struct {
	Count     uint64 `json:"count,omitempty"` // eventfd counter
	Semaphore bool   `json:"semaphore,omitempty"`
	// timerfd
	Clock        int    `json:"clock,omitempty"`
	Ticks        uint64 `json:"ticks,omitempty"` // expirations not read yet
	SettimeFlags int    `json:"settime_flags,omitempty"`
	IntervalNs   int64  `json:"interval_ns,omitempty"`
	ValueNs      int64  `json:"value_ns,omitempty"` // remaining until the next expiry
	// signalfd
	SigMask uint64 `json:"sigmask,omitempty"`
	// epoll
	Items []EpollItem `json:"items,omitempty"`
	// pidfd
	PID sys.PID `json:"pid,omitempty"`
	// inotify
	Watches []InotifyWatch `json:"watches,omitempty"`
	// fanotify
	Fanotify *Fanotify `json:"fanotify,omitempty"`
}

// Fanotify is a fanotify group: the flags it was made with and its marks.
type Fanotify struct {
	Flags      uint32 `json:"flags"`       // fanotify_init flags
	EventFlags uint32 `json:"event_flags"` // fanotify_init event_f_flags
	// Marks are in the order fdinfo lists them (the newest first).
	Marks []FanotifyMark `json:"marks,omitempty"`
}

// FanotifyMark is one mark of a fanotify group: on an inode, a mount or
// a whole file system (Type "inode", "mount", "filesystem"), reached at
// restore by Path (the file, or the mount point).
type FanotifyMark struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino,omitempty"`
	// Flags are the FAN_MARK_* flags fdinfo shows (IGNORED_SURV_MODIFY,
	// EVICTABLE, IGNORE).
	Flags       uint32 `json:"flags,omitempty"`
	Mask        uint64 `json:"mask,omitempty"`
	IgnoredMask uint64 `json:"ignored_mask,omitempty"`
}

// InotifyWatch is one watch of an inotify instance: its watch descriptor
// (which programs use as a key), its mask, and the file it watches.
type InotifyWatch struct {
	WD   int    `json:"wd"`
	Mask uint32 `json:"mask"`
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Ghost is set for a watched file deleted since, which an fd of the
	// dump still holds: the deleted file as that fd saved it, made again
	// once for both.
	Ghost *FileRef `json:"ghost,omitempty"`
}

// EpollItem is one file registered in an epoll set.
type EpollItem struct {
	FD     sys.TargetFD `json:"fd"`   // the fd number it was registered under
	File   int          `json:"file"` // File.ID of the registered file
	Events uint32       `json:"events"`
	Data   uint64       `json:"data"`
}

// File is one open file description. Several fds (and later several
// processes) can share it.
type File struct {
	ID    int      `json:"id"`
	Kind  FileKind `json:"kind"`
	Flags int      `json:"flags"` // O_* status flags, without O_CLOEXEC
	Pos   int64    `json:"pos"`
	Ref   FileRef  `json:"ref"`
	// Target is where a symbolic link (FileSymlink) points.
	Target string `json:"target,omitempty"`
	// Rdev is the device number of a character device.
	Rdev uint64 `json:"rdev,omitempty"`
	// Pipe is set for pipes: the pipe's inode, and which end this is.
	Pipe *Pipe `json:"pipe,omitempty"`
	// Event is set for event files.
	Event *EventFile `json:"event,omitempty"`
	// Socket is set for sockets.
	Socket *Socket `json:"socket,omitempty"`
	// Pty is set for a pseudo-terminal master (FilePtmx) and for the
	// slaves (FileTTY) of a master in the dump: the whole pair's state,
	// on each of them.
	Pty *Pty `json:"pty,omitempty"`
	// Owner is who gets SIGIO for the file (F_SETOWN_EX, F_SETSIG).
	Owner *FileOwner `json:"owner,omitempty"`
	// Locks are the OFD and flock locks on the description.
	Locks []Lock `json:"locks,omitempty"`
}

// Pty is a pseudo-terminal pair whose master is in the dump.
type Pty struct {
	Index  int  `json:"index"`            // N of /dev/pts/N
	Master bool `json:"master,omitempty"` // this description is the master
	// DevTTY: this description is an open of /dev/tty, which stands for
	// the opener's controlling terminal, this pty.
	DevTTY bool `json:"dev_tty,omitempty"`
	// Termios are the terminal's settings (TCGETS2), Winsize its window
	// size (rows, columns, x and y pixels: TIOCGWINSZ).
	Termios Termios   `json:"termios"`
	Winsize [4]uint16 `json:"winsize"`
	// Packet is the master's packet mode (TIOCPKT), Locked its lock
	// (TIOCSPTLCK: the slave cannot be opened), Exclusive the slave's
	// TIOCEXCL.
	Packet    bool `json:"packet,omitempty"`
	Locked    bool `json:"locked,omitempty"`
	Exclusive bool `json:"exclusive,omitempty"`
	// UID, GID and Mode are those of the slave's inode /dev/pts/N (its
	// creator's, or what grantpt or the program set).
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Mode uint32 `json:"mode"`
	// HungUp: this description is a slave whose master was closed: the
	// pty is hung up (reads end of file, writes fail) and /dev/pts/N is
	// gone. It is made again as a pair whose master is closed at the end
	// of the restore.
	HungUp bool `json:"hung_up,omitempty"`
	// SlaveClosed: the slave had been opened and every fd of it closed
	// (the master reads EIO, polls POLLHUP).
	SlaveClosed bool `json:"slave_closed,omitempty"`
	// InputID names the FileData record of the bytes written to the
	// master and not read from the slave yet, OutputID of those written
	// to the slave and not read from the master; 0 if none.
	InputID  int `json:"input_id,omitempty"`
	OutputID int `json:"output_id,omitempty"`
	// Session is the session whose controlling terminal it is (its leader
	// is in the dump), 0 if none; Foreground its foreground process group.
	Session    sys.PID `json:"session,omitempty"`
	Foreground sys.PID `json:"foreground,omitempty"`
}

// Termios is struct termios2: a terminal's modes, control characters
// and speeds.
type Termios struct {
	Iflag  uint32   `json:"iflag"`
	Oflag  uint32   `json:"oflag"`
	Cflag  uint32   `json:"cflag"`
	Lflag  uint32   `json:"lflag"`
	Line   uint8    `json:"line"`
	CC     [19]byte `json:"cc"`
	Ispeed uint32   `json:"ispeed"`
	Ospeed uint32   `json:"ospeed"`
}

// FileOwner is the F_SETOWN_EX owner of an open file description and its
// F_SETSIG signal (0: SIGIO).
type FileOwner struct {
	Type int `json:"type"` // F_OWNER_TID, F_OWNER_PID, F_OWNER_PGRP
	PID  int `json:"pid"`
	Sig  int `json:"sig,omitempty"`
	// UID and EUID are the real and effective user IDs recorded with
	// the owner (F_GETOWNER_UIDS): of the process that set it.
	UID  uint32 `json:"uid,omitempty"`
	EUID uint32 `json:"euid,omitempty"`
}

// Pipe describes one end of a pipe.
type Pipe struct {
	Ino      uint64 `json:"ino"`
	Write    bool   `json:"write"`    // the write end
	External bool   `json:"external"` // the other end is outside the dump
	// PeerClosed: nobody had the other end open any more (a reader sees
	// EOF once the data is read, a writer gets EPIPE).
	PeerClosed bool `json:"peer_closed,omitempty"`
	// PeerReset is set when the closed peer left ECONNRESET pending (it
	// had data unread).
	PeerReset bool `json:"peer_reset,omitempty"`
	Size      int  `json:"size"` // pipe capacity (F_GETPIPE_SZ)
	// DataID names the FileData record with the bytes that were buffered
	// in the pipe, 0 if none.
	DataID int `json:"data_id,omitempty"`
}

// FD is one entry of a file descriptor table.
type FD struct {
	FD      sys.TargetFD `json:"fd"`
	File    int          `json:"file"` // File.ID
	CloExec bool         `json:"cloexec,omitempty"`
	// Locks are the POSIX (fcntl) locks this process holds on the file,
	// taken through this fd: they belong to the process, not to the
	// open file description.
	Locks []Lock `json:"locks,omitempty"`
}

// LockKind says whose a file lock is.
type LockKind string

// Lock kinds.
const (
	LockPOSIX LockKind = "posix" // fcntl F_SETLK: the process's
	LockOFD   LockKind = "ofd"   // F_OFD_SETLK: the open file description's
	LockFlock LockKind = "flock" // flock(2): the open file description's
	LockLease LockKind = "lease" // F_SETLEASE, active: the open file description's
)

// Lock is one file lock: a byte range (End -1: to the end of the file,
// however long it grows) locked for reading or writing; flock locks the
// whole file.
type Lock struct {
	Kind  LockKind `json:"kind"`
	Write bool     `json:"write,omitempty"`
	Start int64    `json:"start,omitempty"`
	End   int64    `json:"end"` // inclusive, -1 for EOF
	// PID is, for a flock lock or a lease, the process that took it
	// (/proc/locks shows it); 0 if unknown.
	PID sys.PID `json:"pid,omitempty"`
}

// FileData is the metadata of a TypeFileData record: the content of a
// deleted file or the buffered bytes of a pipe. The data holds Size bytes
// followed by zero padding.
type FileData struct {
	ID   int   `json:"id"`
	Size int64 `json:"size"`
}

// Thread is the state of one thread (task).
type Thread struct {
	TID   sys.TID `json:"tid"`
	Comm  string  `json:"comm"`
	State string  `json:"state"` // from /proc: R, S, D, T, ...
	Regs  Regs    `json:"regs"`
	// XState is the NT_X86_XSTATE register set: x87, SSE, AVX, AVX-512,
	// MXCSR and the rest, in the kernel's XSAVE layout.
	XState   []byte    `json:"xstate"`
	SigMask  uint64    `json:"sigmask"`
	Pending  []SigInfo `json:"pending,omitempty"` // thread-directed
	AltStack AltStack  `json:"altstack"`
	Rseq     Rseq      `json:"rseq"`
	Robust   Robust    `json:"robust"`
	// ClearTID is the clear_child_tid address (set_tid_address).
	ClearTID uint64 `json:"clear_tid"`
	// InSyscall is the syscall the thread was blocked in, -1 for none.
	InSyscall int64 `json:"in_syscall"`
	// Restart is, for a thread stopped in restart_syscall (a sleep, poll
	// or futex wait the kernel resumed after an earlier stop), the call
	// it resumes, found at the dump; 0 if none or unknown.
	Restart int64 `json:"restart,omitempty"`
	// SeccompStrict is set for a thread in SECCOMP_MODE_STRICT (only
	// read, write, exit and sigreturn); set again last at restore.
	SeccompStrict bool `json:"seccomp_strict,omitempty"`
	// Sched is the thread's scheduling policy and parameters; nil in
	// images that predate it (then left as the restorer's).
	Sched *Sched `json:"sched,omitempty"`
	// Affinity is the CPU affinity mask (sched_getaffinity), 64 CPUs a word.
	Affinity []uint64 `json:"affinity,omitempty"`
	// IOPrio is the I/O priority (ioprio_get). Affinity, IOPrio and
	// TimerSlack are restored only when Sched is set.
	IOPrio int `json:"ioprio,omitempty"`
	// TimerSlack is the thread's timer slack in ns (PR_GET_TIMERSLACK).
	TimerSlack uint64 `json:"timer_slack,omitempty"`
	// Creds are the thread's credentials when they differ from the
	// process's (Process.Creds, the leader's): setresuid(2) and friends
	// change only the calling thread's, seccomp filters can be per thread.
	Creds *Creds `json:"creds,omitempty"`
	// SpecCtrl are PR_GET_SPECULATION_CTRL of the store bypass, indirect
	// branch and L1D flush controls; TSC is PR_GET_TSC; MCEKill is
	// PR_MCE_KILL_GET. Restored only when Sched is set.
	SpecCtrl []int `json:"spec_ctrl,omitempty"`
	TSC      int   `json:"tsc,omitempty"`
	MCEKill  int   `json:"mce_kill,omitempty"`
	// MemPolicy is the thread's NUMA memory policy (set_mempolicy), nil
	// for the default.
	MemPolicy *MemPolicy `json:"mem_policy,omitempty"`
}

// MemPolicy is a NUMA memory policy as get_mempolicy(2) returns it: the
// mode (MPOL_BIND, MPOL_INTERLEAVE, ...) with its mode flags OR'ed in
// (MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING),
// and the nodemask, 64 nodes a word (the nodes the program gave, for a
// policy with MPOL_F_STATIC_NODES or MPOL_F_RELATIVE_NODES).
type MemPolicy struct {
	Mode  uint32   `json:"mode"`
	Nodes []uint64 `json:"nodes,omitempty"`
}

// NUMA memory policy modes and mode flags (linux/mempolicy.h).
const (
	MpolDefault            = 0
	MpolPreferred          = 1
	MpolBind               = 2
	MpolInterleave         = 3
	MpolLocal              = 4
	MpolPreferredMany      = 5
	MpolWeightedInterleave = 6
	MpolMax                = 7 // the first mode that is none

	MpolFNumaBalancing = 1 << 13
	MpolFRelativeNodes = 1 << 14
	MpolFStaticNodes   = 1 << 15
	MpolModeFlags      = MpolFStaticNodes | MpolFRelativeNodes | MpolFNumaBalancing

	// MemPolicyMaxNode is the number of nodes a MemPolicy's nodemask
	// holds at most (get_mempolicy's maxnode at the dump).
	MemPolicyMaxNode = 1024
)

// Sched is struct sched_attr (sched_getattr(2)) with the nice value,
// which sched_getattr leaves out for real-time policies.
type Sched struct {
	Policy   uint32 `json:"policy"`
	Flags    uint64 `json:"flags,omitempty"` // SCHED_FLAG_RESET_ON_FORK, ...
	Nice     int32  `json:"nice"`
	Priority uint32 `json:"priority,omitempty"`
	Runtime  uint64 `json:"runtime,omitempty"` // SCHED_DEADLINE, ns
	Deadline uint64 `json:"deadline,omitempty"`
	Period   uint64 `json:"period,omitempty"`
	UtilMin  uint32 `json:"util_min,omitempty"`
	UtilMax  uint32 `json:"util_max,omitempty"`
}

// Regs is x86-64 struct user_regs_struct.
type Regs struct {
	R15, R14, R13, R12, Rbp, Rbx, R11, R10, R9, R8  uint64
	Rax, Rcx, Rdx, Rsi, Rdi, OrigRax, Rip, Cs       uint64
	Eflags, Rsp, Ss, FsBase, GsBase, Ds, Es, Fs, Gs uint64
}

// AltStack is a sigaltstack.
type AltStack struct {
	SP    uint64 `json:"sp"`
	Flags int32  `json:"flags"`
	Size  uint64 `json:"size"`
}

// Rseq is a thread's rseq registration (PTRACE_GET_RSEQ_CONFIGURATION).
type Rseq struct {
	Ptr   uint64 `json:"ptr"`
	Size  uint32 `json:"size"`
	Sig   uint32 `json:"sig"`
	Flags uint32 `json:"flags"`
}

// Robust is a thread's robust futex list head.
type Robust struct {
	Head uint64 `json:"head"`
	Len  uint64 `json:"len"`
}

// SigInfo is a raw 128-byte kernel siginfo.
type SigInfo []byte

// Signals is the process-wide signal state.
type Signals struct {
	Actions []Sigaction `json:"actions"` // index = signal number - 1
	Pending []SigInfo   `json:"pending,omitempty"`
}

// Sigaction is the kernel's struct sigaction for x86-64.
type Sigaction struct {
	Handler  uint64 `json:"handler"`
	Flags    uint64 `json:"flags"`
	Restorer uint64 `json:"restorer"`
	Mask     uint64 `json:"mask"`
}

// Timers holds interval timers and POSIX timers.
type Timers struct {
	Real    ITimer       `json:"real"`
	Virtual ITimer       `json:"virtual"`
	Prof    ITimer       `json:"prof"`
	Posix   []PosixTimer `json:"posix,omitempty"`
}

// ITimer is a struct itimerval in microseconds.
type ITimer struct {
	IntervalUs int64 `json:"interval_us"`
	ValueUs    int64 `json:"value_us"`
}

// PosixTimer is a timer_create timer.
type PosixTimer struct {
	ID        int     `json:"id"`
	Clock     int     `json:"clock"`
	Signal    int     `json:"signal"`
	Notify    int     `json:"notify"` // SIGEV_*
	NotifyTID sys.TID `json:"notify_tid,omitempty"`
	// NotifyExited marks a SIGEV_THREAD_ID timer whose thread NotifyTID
	// has exited (its signals go nowhere).
	NotifyExited bool   `json:"notify_exited,omitempty"`
	SigValue     uint64 `json:"sigval"`
	IntervalNs   int64  `json:"interval_ns"`
	ValueNs      int64  `json:"value_ns"`
	Overrun      int    `json:"overrun"`
}

// Rlimit is one resource limit; Cur and Max use ^uint64(0) for unlimited.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// Creds are a process's credentials.
type Creds struct {
	UID        [4]int   `json:"uid"` // real, effective, saved, fs
	GID        [4]int   `json:"gid"`
	Groups     []int    `json:"groups"`
	CapInh     uint64   `json:"cap_inh"`
	CapPrm     uint64   `json:"cap_prm"`
	CapEff     uint64   `json:"cap_eff"`
	CapBnd     uint64   `json:"cap_bnd"`
	CapAmb     uint64   `json:"cap_amb"`
	NoNewPrivs bool     `json:"no_new_privs"`
	Seccomp    int      `json:"seccomp"` // 0 none, 1 strict, 2 filter
	Filters    [][]byte `json:"seccomp_filters,omitempty"`
	// FilterFlags are the SECCOMP_FILTER_FLAG_* each filter was installed
	// with (PTRACE_SECCOMP_GET_METADATA), in the order of Filters.
	FilterFlags []uint64 `json:"seccomp_filter_flags,omitempty"`
	// Securebits are the SECBIT_* bits (PR_GET_SECUREBITS), keep-caps
	// included.
	Securebits int `json:"securebits,omitempty"`
}

// ProcMisc holds the small things.
type ProcMisc struct {
	Umask int    `json:"umask"`
	Cwd   string `json:"cwd"`
	// CwdRef identifies the working directory (device, inode, mode,
	// owner, times). One that had been removed (Deleted) is made again,
	// entered and removed again, like a deleted directory held open.
	CwdRef *FileRef `json:"cwd_ref,omitempty"`
	// Root is the root directory (chroot), as ckpt sees it, and RootRef
	// identifies it.
	Root        string   `json:"root"`
	RootRef     *FileRef `json:"root_ref,omitempty"`
	Personality uint64   `json:"personality"`
	PdeathSig   int      `json:"pdeath_sig"`
	Dumpable    int      `json:"dumpable"`
	// Stopped is set when the process was in group-stop (SIGSTOP).
	Stopped bool `json:"stopped,omitempty"`
	// StopSignal is the signal that stopped it (SIGSTOP, SIGTSTP, SIGTTIN
	// or SIGTTOU), which its parent's waitpid(WUNTRACED) reports; 0 in
	// old images means SIGSTOP.
	StopSignal int `json:"stop_signal,omitempty"`
	// StopUnreported is set when its parent (in the image) had not yet
	// collected that stop with wait: it is reported again after the
	// restore, and only then.
	StopUnreported bool `json:"stop_unreported,omitempty"`
	// ChildSubreaper is PR_GET_CHILD_SUBREAPER.
	ChildSubreaper bool `json:"child_subreaper,omitempty"`
	// THPDisable is what PR_GET_THP_DISABLE returned (bit 0: disabled,
	// the other bits the PR_THP_DISABLE_* flags).
	THPDisable int `json:"thp_disable,omitempty"`
	// MDWE are the PR_MDWE_* flags of memory-deny-write-execute.
	MDWE int `json:"mdwe,omitempty"`
	// OOMScoreAdj is /proc/PID/oom_score_adj.
	OOMScoreAdj int `json:"oom_score_adj,omitempty"`
	// CoredumpFilter is /proc/PID/coredump_filter; nil in older images.
	CoredumpFilter *uint64 `json:"coredump_filter,omitempty"`
	// LoginUID is /proc/PID/loginuid (4294967295: not set); nil in older
	// images.
	LoginUID *uint32 `json:"loginuid,omitempty"`
	// AuditSession is /proc/PID/sessionid (4294967295: none); nil in
	// older images and where the kernel has no audit.
	AuditSession *uint32 `json:"audit_session,omitempty"`
	// Membarrier are the membarrier(2) registrations
	// (MEMBARRIER_CMD_GET_REGISTRATIONS: MEMBARRIER_CMD_REGISTER_* bits).
	Membarrier int `json:"membarrier,omitempty"`
}

// Pages is the metadata of a TypePages record: page runs of one process.
// The record data holds the contents of the runs that are not Zero, in
// order, each run's pages back to back.
type Pages struct {
	PID  sys.PID   `json:"pid"`
	Runs []PageRun `json:"runs"`
}

// PageRun is a run of consecutive pages.
type PageRun struct {
	Addr  uint64 `json:"addr"`
	Pages uint64 `json:"pages"`
	Zero  bool   `json:"zero,omitempty"` // all bytes zero: no data stored
	// Parent marks pages that are the same frames as the parent's pages
	// at the same addresses (copy-on-write since a fork): no data stored,
	// the restored child shares the restored parent's pages.
	Parent bool `json:"parent,omitempty"`
}

// Membership is a multicast group a socket joined: the group's address
// (IPv4 or IPv6), for an IPv4 group imr_address as the program gave it
// (struct ip_mreqn; "" for 0.0.0.0), the interface (its index and name
// at the dump), and the source filter: MCAST_INCLUDE (Include) or
// MCAST_EXCLUDE and its sources.
type Membership struct {
	Group     string   `json:"group"`
	Address   string   `json:"address,omitempty"`
	Ifindex   int      `json:"ifindex"`
	Interface string   `json:"interface,omitempty"`
	Include   bool     `json:"include,omitempty"`
	Sources   []string `json:"sources,omitempty"`
}
