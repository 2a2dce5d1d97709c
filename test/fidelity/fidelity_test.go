// Package fidelity is ckpt's fidelity suite: small self-checking C
// programs (testdata/fidelity, protocol in fidelity.h), each setting up one
// family of process state, checkpointed and restored in several ways, then
// verifying from inside that everything is as they left it — or refused by
// the dump, by name, while the program goes on untouched. The table of
// TestFidelity lists the cases; pkg/inventory lists the attributes.
package fidelity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/internal/testenv"
)

// fcase is one row of the fidelity table: a self-checking C program of
// testdata/fidelity (protocol in fidelity.h) and what ckpt must do with it.
type fcase struct {
	name string
	src  string   // file in testdata/fidelity
	args []string // after LOG; "DIR/" at the start is the case's directory
	// refuse, if set, is a substring the dump's error must contain: the
	// dump must refuse, naming the process, and leave it untouched. If
	// empty the state must be restored exactly (the program says PASS).
	refuse string
	// cflags are gcc flags besides -Wall -Werror -Wno-format-truncation -O1
	// -g -pthread.
	cflags []string
	// lockPtys: the case restores pseudo-terminals, whose indexes must stay
	// free between dump and restore (testenv.LockPtys).
	lockPtys bool
	// dumpEnv are extra environment variables for `ckpt dump`; dumpWrap is
	// a command line ckpt dump runs under (e.g. prlimit lowering its own
	// limits).
	dumpWrap []string
	// beforeRedo, if set, runs between a killing dump and its restore,
	// with the case's directory (e.g. to remove what the restore must
	// then make again).
	beforeRedo func(t *testing.T, dir string)
}

// cases is the fidelity table. Adding a case is one C file in
// testdata/fidelity and one row here.
var cases = []fcase{
	// Process attributes (pkg/inventory: the process, thread and creds rows).
	{name: "proc_threadcomm", src: "proc_threadcomm.c"},
	{name: "proc_restart", src: "proc_restart.c"},
	{name: "proc_sched", src: "proc_sched.c"},
	{name: "proc_prctl", src: "proc_prctl.c"},
	{name: "proc_dumpable_uid", src: "proc_dumpable_uid.c"},
	{name: "proc_creds", src: "proc_creds.c"},
	{name: "proc_seccomp", src: "proc_seccomp.c"},
	{name: "proc_seccomp_tsync", src: "proc_seccomp_tsync.c"},
	{name: "proc_timer_deadthread", src: "proc_timer_deadthread.c"},
	{name: "proc_timer_deadthread_taken", src: "proc_timer_deadthread.c", args: []string{"taken"}, refuse: "which has exited, and another task has that number now: cannot be restored"},
	{name: "proc_sigtrap", src: "proc_sigtrap.c"},
	{name: "proc_rlimit", src: "proc_rlimit.c"},
	{name: "proc_threadctl", src: "proc_threadctl.c"},
	{name: "proc_rseq", src: "proc_rseq.c"},
	{name: "proc_vfork", src: "proc_vfork.c"},
	{name: "proc_deadleader", src: "proc_deadleader.c"},
	{name: "proc_deadleader_code", src: "proc_deadleader.c", args: []string{"code"}},
	{name: "proc_deadleader_child", src: "proc_deadleader.c", args: []string{"child"}},
	{name: "proc_deadleader_pdeath", src: "proc_deadleader.c", args: []string{"pdeath"}},
	{name: "proc_deadleader_seccomp", src: "proc_deadleader.c", args: []string{"seccomp"}, refuse: "(the leader, exited): seccomp mode 2: the filters of a dead thread cannot be read"},
	{name: "proc_clone_vm", src: "proc_clone_vm.c", refuse: "shares its memory (a vfork() child before it calls exec or exits, or clone(CLONE_VM)): the parent is not waiting in vfork()"},
	// File descriptors (pkg/fdkind): status flags, FD_CLOEXEC, positions,
	// owners, shared descriptions.
	{name: "fd_flags", src: "fd_flags.c"},
	{name: "fd_shm", src: "fd_shm.c"},
	{name: "fd_pipes", src: "fd_pipes.c"},
	{name: "fd_pipe_reopen", src: "fd_pipe_reopen.c"},
	{name: "fd_ghost_attrs", src: "fd_ghost_attrs.c", args: []string{"DIR/"}},
	{name: "fd_linked_elsewhere", src: "fd_linked_elsewhere.c", args: []string{"DIR/"}},
	{name: "fd_nsfile", src: "fd_nsfile.c", args: []string{"own"}},
	{name: "fd_devnodes", src: "fd_devnodes.c", args: []string{"DIR/"}},
	{name: "fd_memfd_mapped_exec", src: "fd_memfd_mapped_exec.c"},
	{name: "fd_shared_table", src: "fd_shared_table.c", args: []string{"parent"}},
	{name: "pty_hung_up", src: "pty_hung_up.c", lockPtys: true},
	{name: "fd_fifo", src: "fd_fifo.c", args: []string{"DIR/"}},
	{name: "fd_locks", src: "fd_locks.c", args: []string{"DIR/"}},
	{name: "fd_flock_owner", src: "fd_flock_owner.c", args: []string{"DIR/"}},
	{name: "fd_leases", src: "fd_leases.c", args: []string{"active", "DIR/"}},
	{name: "fd_epoll", src: "fd_epoll.c"},
	{name: "fd_epoll_closed", src: "fd_epoll_closed.c"},
	// Files of the /proc directory of a child that exited since.
	{name: "fd_procgone", src: "fd_procgone.c"},
	{name: "fd_procgone_cwd", src: "fd_procgone.c", args: []string{"cwd"}},
	{name: "fd_inotify", src: "fd_inotify.c", args: []string{"DIR/"}},
	{name: "fd_inotify_deleted", src: "fd_inotify_deleted.c", args: []string{"open", "DIR/"}},
	{name: "fd_notify_quiet", src: "fd_notify_quiet.c", args: []string{"DIR/"}},
	{name: "fd_misc", src: "fd_misc.c", args: []string{"DIR/"}},
	{name: "fd_mtime", src: "fd_mtime.c", args: []string{"DIR/"}},
	{name: "fd_deldirs", src: "fd_deldirs.c", args: []string{"DIR/"}},
	{name: "fd_chroot", src: "fd_chroot.c", args: []string{"DIR/"}},
	{name: "fd_owner", src: "fd_owner.c"},
	{name: "fd_fanotify", src: "fd_fanotify.c", args: []string{"DIR/"}},
	// Pseudo-terminals (pkg/fdkind/pty.go, pkg/restore/ctty.go).
	{name: "pty_pair", src: "pty_pair.c", lockPtys: true},
	{name: "fd_sqlite", src: "fd_sqlite.c", args: []string{"DIR/"}, cflags: []string{"-Wl,--no-as-needed", "-lsqlite3"}},
	// Memory (pkg/dump memory.go, vmas.go, shmobj.go, sysvipc.go): attributes
	// of mappings.
	{name: "mem_vmaflags", src: "mem_vmaflags.c"},
	// Shared anonymous memory across fork: pages only a child or a gone
	// child wrote, an object no mapping covers whole, identity, sharing.
	{name: "mem_shared", src: "mem_shared.c"},
	// A private memfd mapping partly copied on write, an area unmapped,
	// mapped again and moved, a deleted sparse file mapped shared,
	// PROT_NONE memory with data.
	{name: "mem_contents", src: "mem_contents.c", args: []string{"DIR/"}},
	// System V message queues: left alone when unchanged, made again when
	// gone.
	{name: "mem_sysv_msg", src: "mem_sysv_msg.c", args: []string{"DIR/msqids"}},
	{name: "mem_sysv_semset", src: "mem_sysv_sem.c"},
	// A SysV attachment split by mprotect and madvise (zdtm shm-mp).
	{name: "mem_sysv_split", src: "mem_sysv_split.c"},
	{name: "mem_sysv_msg_gone", src: "mem_sysv_msg.c", args: []string{"DIR/msqids", "gone"}, beforeRedo: removeMsgQueues},
	{name: "mem_hugetlb", src: "mem_hugetlb.c"},
	{name: "mem_hugetlb_sysv", src: "mem_hugetlb.c", args: []string{"sysv"}},
	{name: "mem_mbind", src: "mem_numa.c", args: []string{"mbind"}},
	{name: "mem_mempolicy", src: "mem_numa.c", args: []string{"mempolicy"}},
	// AIO contexts: the ring at its address, head, tail, completions.
	{name: "proc_aio", src: "proc_aio.c"},
	// Private memory shared copy-on-write after fork: 64 MiB, 3 children,
	// one writing some pages; still shared (same frames) after the
	// restore, stored once (TestCOWImageSize).
	{name: "mem_cow", src: "mem_cow.c"},
	// The process tree and the freeze (sessions, stops, injection).
	{name: "novdso", src: "tree_novdso.c"},
	{name: "seccomp_strict", src: "tree_seccomp_strict.c"},
	{name: "sigtrap", src: "tree_sigtrap.c"},
	{name: "pgrp", src: "tree_pgrp.c"},
	{name: "stopped", src: "tree_stopped.c"},
	{name: "zombies", src: "tree_zombies.c"},
	{name: "stopped_pending", src: "tree_stopped_pending.c"},
	{name: "session_chain", src: "tree_session_chain.c"},
	{name: "outside_member", src: "tree_outside_member.c", refuse: "outside the dump, which keeps PID"},
	// Sockets (pkg/sockets: the option inventory, shutdown state, queues).
	{name: "sock_tcp4", src: "sock_inet.c", args: []string{"tcp4"}},
	{name: "sock_tcp6", src: "sock_inet.c", args: []string{"tcp6"}},
	{name: "sock_mapped", src: "sock_inet.c", args: []string{"mapped"}},
	{name: "sock_udp4", src: "sock_inet.c", args: []string{"udp4"}},
	{name: "sock_udp6", src: "sock_inet.c", args: []string{"udp6"}},
	{name: "sock_unix", src: "sock_unix.c", args: []string{"DIR/"}},
	{name: "sock_dgram_cross", src: "sock_dgram_cross.c"},
	{name: "sock_bigqueue", src: "sock_bigqueue.c", args: []string{"32"}},
	// TCP in the states of a close, and closed sockets (pkg/sockets
	// tcpstates.go): state, every byte once, each FIN once, no reset.
	{name: "sock_tcp_close_wait_tcp4", src: "sock_tcp_states.c", args: []string{"close_wait", "tcp4"}},
	{name: "sock_tcp_close_wait_tcp6", src: "sock_tcp_states.c", args: []string{"close_wait", "tcp6"}},
	{name: "sock_tcp_close_wait_mapped", src: "sock_tcp_states.c", args: []string{"close_wait", "mapped"}},
	{name: "sock_tcp_fin_wait1_tcp4", src: "sock_tcp_states.c", args: []string{"fin_wait1", "tcp4"}},
	{name: "sock_tcp_fin_wait1_tcp6", src: "sock_tcp_states.c", args: []string{"fin_wait1", "tcp6"}},
	{name: "sock_tcp_fin_wait1_mapped", src: "sock_tcp_states.c", args: []string{"fin_wait1", "mapped"}},
	{name: "sock_tcp_last_ack_tcp4", src: "sock_tcp_states.c", args: []string{"last_ack", "tcp4"}},
	{name: "sock_tcp_last_ack_tcp6", src: "sock_tcp_states.c", args: []string{"last_ack", "tcp6"}},
	{name: "sock_tcp_last_ack_mapped", src: "sock_tcp_states.c", args: []string{"last_ack", "mapped"}},
	{name: "sock_tcp_closing_tcp4", src: "sock_tcp_states.c", args: []string{"closing", "tcp4"}},
	{name: "sock_tcp_closing_tcp6", src: "sock_tcp_states.c", args: []string{"closing", "tcp6"}},
	{name: "sock_tcp_closing_mapped", src: "sock_tcp_states.c", args: []string{"closing", "mapped"}},
	{name: "sock_tcp_syn_sent_tcp4", src: "sock_tcp_states.c", args: []string{"syn_sent", "tcp4"}},
	{name: "sock_tcp_syn_sent_tcp6", src: "sock_tcp_states.c", args: []string{"syn_sent", "tcp6"}},
	{name: "sock_tcp_syn_sent_mapped", src: "sock_tcp_states.c", args: []string{"syn_sent", "mapped"}},
	{name: "sock_tcp_syn_recv", src: "sock_tcp_states.c", args: []string{"syn_recv", "tcp4"}, refuse: "listening socket with 1 connections half-open (SYN_RECV"},
	{name: "sock_tcp_reset", src: "sock_tcp_states.c", args: []string{"reset", "tcp4"}},
	{name: "sock_tcp_refused", src: "sock_tcp_states.c", args: []string{"refused", "tcp4"}},
	// The socket layer's state of a connection (pkg/sockets
	// tcpconnecting.go): a non-blocking connect never called again.
	{name: "sock_tcp_connecting_tcp4", src: "sock_tcp_connecting.c", args: []string{"nonblocking", "tcp4"}},
	{name: "sock_tcp_connecting_tcp6", src: "sock_tcp_connecting.c", args: []string{"nonblocking", "tcp6"}},
	{name: "sock_tcp_connecting_mapped", src: "sock_tcp_connecting.c", args: []string{"nonblocking", "mapped"}},
	{name: "sock_tcp_connecting_blocking_tcp4", src: "sock_tcp_connecting.c", args: []string{"blocking", "tcp4"}},
	{name: "sock_tcp_connecting_close_wait_tcp4", src: "sock_tcp_connecting.c", args: []string{"close_wait_nb", "tcp4"}},
	{name: "sock_tcp_connecting_fin_wait2_tcp4", src: "sock_tcp_connecting.c", args: []string{"fin_wait2_nb", "tcp4"}},
	{name: "sock_tcp_bound_tcp4", src: "sock_tcp_states.c", args: []string{"bound", "tcp4"}},
	{name: "sock_tcp_bound_tcp6", src: "sock_tcp_states.c", args: []string{"bound", "tcp6"}},
	{name: "sock_tcp_bound_mapped", src: "sock_tcp_states.c", args: []string{"bound", "mapped"}},
	{name: "sock_tcp_unbound_tcp4", src: "sock_tcp_states.c", args: []string{"unbound", "tcp4"}},
	// TCP sockets closed after a connection (pkg/sockets tcpclosed.go):
	// everything seen of them, and what using them up gives, as a twin.
	{name: "sock_tcp_closed_reset_tcp4", src: "sock_tcp_closed.c", args: []string{"reset", "tcp4"}},
	{name: "sock_tcp_closed_reset_tcp6", src: "sock_tcp_closed.c", args: []string{"reset", "tcp6"}},
	{name: "sock_tcp_closed_reset_mapped", src: "sock_tcp_closed.c", args: []string{"reset", "mapped"}},
	{name: "sock_tcp_closed_reset_data_tcp4", src: "sock_tcp_closed.c", args: []string{"reset_data", "tcp4"}},
	{name: "sock_tcp_closed_reset_bound_tcp4", src: "sock_tcp_closed.c", args: []string{"reset_bound", "tcp4"}},
	{name: "sock_tcp_closed_reset_bound_tcp6", src: "sock_tcp_closed.c", args: []string{"reset_bound", "tcp6"}},
	{name: "sock_tcp_closed_reset_accepted_tcp4", src: "sock_tcp_closed.c", args: []string{"reset_accepted", "tcp4"}},
	{name: "sock_tcp_closed_fin_active_tcp4", src: "sock_tcp_closed.c", args: []string{"fin_active", "tcp4"}},
	{name: "sock_tcp_closed_fin_active_tcp6", src: "sock_tcp_closed.c", args: []string{"fin_active", "tcp6"}},
	{name: "sock_tcp_closed_fin_active_mapped", src: "sock_tcp_closed.c", args: []string{"fin_active", "mapped"}},
	{name: "sock_tcp_closed_fin_rdwr_tcp4", src: "sock_tcp_closed.c", args: []string{"fin_rdwr", "tcp4"}},
	{name: "sock_tcp_closed_fin_passive_tcp4", src: "sock_tcp_closed.c", args: []string{"fin_passive", "tcp4"}},
	{name: "sock_tcp_closed_fin_passive_tcp6", src: "sock_tcp_closed.c", args: []string{"fin_passive", "tcp6"}},
	{name: "sock_tcp_closed_reset_nb_tcp4", src: "sock_tcp_closed.c", args: []string{"reset_nb", "tcp4"}},
	{name: "sock_tcp_closed_reset_nb_tcp6", src: "sock_tcp_closed.c", args: []string{"reset_nb", "tcp6"}},
	{name: "sock_tcp_closed_reset_nb_shut_tcp4", src: "sock_tcp_closed.c", args: []string{"reset_nb_shut", "tcp4"}},
	{name: "sock_tcp_closed_refused_nb_shut_tcp4", src: "sock_tcp_closed.c", args: []string{"refused_nb_shut", "tcp4"}},
	{name: "sock_tcp_closed_refused_nb_tcp4", src: "sock_tcp_closed.c", args: []string{"refused_nb", "tcp4"}},
	{name: "sock_tcp_closed_refused_nb_tcp6", src: "sock_tcp_closed.c", args: []string{"refused_nb", "tcp6"}},
	{name: "sock_tcp_closed_refused_tcp4", src: "sock_tcp_closed.c", args: []string{"refused", "tcp4"}},
	{name: "sock_tcp_closed_refused_tcp6", src: "sock_tcp_closed.c", args: []string{"refused", "tcp6"}},
	{name: "sock_tcp_closed_disconnected_tcp4", src: "sock_tcp_closed.c", args: []string{"disconnected", "tcp4"}},
	{name: "sock_tcp_closed_disconnected_mapped", src: "sock_tcp_closed.c", args: []string{"disconnected", "mapped"}},
	{name: "sock_tcp_closed_disconnected_bound_tcp4", src: "sock_tcp_closed.c", args: []string{"disconnected_bound", "tcp4"}},
	{name: "sock_tcp_closed_disconnected_bound_tcp6", src: "sock_tcp_closed.c", args: []string{"disconnected_bound", "tcp6"}},
	{name: "sock_tcp_closed_reset_pending", src: "sock_tcp_closed.c", args: []string{"reset_pending", "tcp4"},
		refuse: "TCP socket closed after a connection with an error pending"},
	{name: "sock_scm_rights", src: "sock_scm.c"},
	// Where a piece of a stream with files starts (a peek cannot tell;
	// the dump reads the kernel's queue): read a byte, three bytes, 4 KiB
	// at a time after the restore, the files come with the same read.
	{name: "sock_scm_pieces", src: "sock_scm_pieces.c"},
	{name: "sock_scm_epoll", src: "sock_scm.c", args: []string{"epoll"}, refuse: "an epoll instance in flight cannot be restored"},
	{name: "sock_scm_deep", src: "sock_scm.c", args: []string{"deep"}, refuse: "in flight in the queue of another such socket"},
	// Sockets bound to abstract names in flight in their own and each
	// other's queues (zdtm scm06): once the dump kills the process only
	// the kernel's garbage collector frees them and their names.
	{name: "sock_scm_abstract", src: "sock_scm_abstract.c"},
	{name: "sock_scm_abstract_one", src: "sock_scm_abstract.c", args: []string{"one"}},
	{name: "sock_scm_pair_unheld", src: "sock_scm_abstract.c", args: []string{"unheld"}, refuse: "in flight, made by process"},
	{name: "sock_scm_listener", src: "sock_scm.c", args: []string{"listener"}, refuse: "whose listener, peer or connections no process holds either"},
	{name: "sock_ebpf_filter", src: "sock_refused.c", args: []string{"ebpf_filter"}, refuse: "an eBPF socket filter (SO_ATTACH_BPF) cannot be read back"},
	// MPTCP sockets that are not connections (Go's listeners since Go
	// 1.24), restored; an MPTCP connection and an MPTCP listener with a
	// connection in its accept queue, refused.
	{name: "sock_mptcp_tcp4", src: "sock_mptcp.c", args: []string{"tcp4"}},
	{name: "sock_mptcp_tcp6", src: "sock_mptcp.c", args: []string{"tcp6"}},
	{name: "sock_mptcp_conn", src: "sock_refused.c", args: []string{"mptcp"}, refuse: "MPTCP connection (ESTABLISHED): its subflows cannot be repaired"},
	{name: "sock_mptcp_acceptq", src: "sock_refused.c", args: []string{"mptcp_acceptq"}, refuse: "MPTCP listening socket with 1 connections not accepted yet"},
	{name: "sock_peercred", src: "sock_peercred.c"},
	{name: "sock_peercred_named", src: "sock_peercred_named.c"},
	{name: "sock_peercred_named_gone", src: "sock_peercred_named.c", args: []string{"gone"}},
	// UNIX connections waiting in an accept queue over the dump, with
	// what their clients (alive, closed) sent.
	{name: "sock_unix_acceptq", src: "sock_unix_acceptq.c"},
	{name: "sock_unix_acceptq_oob", src: "sock_unix_acceptq.c", args: []string{"oob"}, refuse: "out-of-band data (MSG_OOB) queued"},
	{name: "sock_unix_acceptq_path", src: "sock_unix_acceptq.c", args: []string{"path", "DIR/"}},
	{name: "sock_unix_acceptq_self", src: "sock_unix_acceptq.c", args: []string{"self"}},
	{name: "sock_unix_acceptq_outside", src: "sock_unix_acceptq.c", args: []string{"outside"}, refuse: "which is outside the dump or a zombie: its peer credentials could not be made again"},
	{name: "sock_unix_acceptq_relative", src: "sock_unix_acceptq.c", args: []string{"relative"}, refuse: "was closed: that name, which the accepted end gives as its peer's, is not bound again"},
	{name: "sock_peercred_named_outside", src: "sock_peercred_named.c", args: []string{"outside"}, refuse: "which is outside the dump or a zombie"},
	{name: "sock_peercred_gone", src: "sock_peercred.c", args: []string{"gone"}},
	{name: "sock_peercred_outside", src: "sock_peercred.c", args: []string{"outside"}, refuse: "a socket pair made by process"},
	// Inet socket state besides queues and option values (found by CRIU's
	// zdtm tests): delayed-ACK mode, UDP shutdown, nonlocal binds,
	// SO_REUSEPORT groups.
	{name: "sock_quickack", src: "sock_inet_state.c", args: []string{"quickack"}},
	{name: "sock_udp_shutdown", src: "sock_inet_state.c", args: []string{"udp_shutdown"}},
	{name: "sock_freebind", src: "sock_inet_state.c", args: []string{"freebind"}},
	{name: "sock_reuseport", src: "sock_inet_state.c", args: []string{"reuseport"}},
	// State no getsockopt lists, read from the kernel (pkg/bpftask
	// sockextra.go): multicast memberships and their source filters,
	// restored; a reuseport group's program, an IPsec policy, a saved
	// SYN, refused.
	{name: "sock_mcast4", src: "sock_hidden.c", args: []string{"mcast4"}},
	{name: "sock_mcast6", src: "sock_hidden.c", args: []string{"mcast6"}},
	{name: "sock_mcast_raw4", src: "sock_hidden.c", args: []string{"raw4"}},
	{name: "sock_reuseport_cbpf", src: "sock_hidden.c", args: []string{"reuseport_cbpf"}, refuse: "its SO_REUSEPORT group has a program (SO_ATTACH_REUSEPORT_CBPF or _EBPF), which cannot be read back: cannot be restored"},
	{name: "sock_saved_syn", src: "sock_hidden.c", args: []string{"saved_syn"}, refuse: "TCP socket: a SYN saved by TCP_SAVE_SYN not yet read (reading it frees it): cannot be restored"},
	{name: "sock_xfrm_policy", src: "sock_hidden.c", args: []string{"xfrm"}, refuse: "a per-socket IPsec policy (IP_XFRM_POLICY or IPV6_XFRM_POLICY): cannot be restored"},
	// The file of a UNIX socket bound to a path name: owner and
	// permissions, relative names, names removed (directory too), a
	// bound datagram socket whose clients are gone.
	{name: "sock_unix_file_owner", src: "sock_unix_file.c", args: []string{"DIR/", "owner"}},
	{name: "sock_unix_file_relative", src: "sock_unix_file.c", args: []string{"DIR/", "relative"}},
	{name: "sock_unix_file_gone", src: "sock_unix_file.c", args: []string{"DIR/", "gone"}},
	{name: "sock_unix_file_orphan", src: "sock_unix_file.c", args: []string{"DIR/", "orphan"}},
	{name: "sock_unix_file_moved", src: "sock_unix_file.c", args: []string{"DIR/", "moved"}, refuse: "UNIX socket bound to the relative name \"moved.sock\", which is not in the process's working directory"},
	{name: "sock_udplite4", src: "sock_families.c", args: []string{"udplite4"}},
	{name: "sock_udplite6", src: "sock_families.c", args: []string{"udplite6"}},
	{name: "sock_ping4", src: "sock_families.c", args: []string{"ping4"}},
	{name: "sock_ping6", src: "sock_families.c", args: []string{"ping6"}},
	{name: "sock_ping4_unbound", src: "sock_families.c", args: []string{"ping4_unbound"}},
	{name: "sock_raw4", src: "sock_families.c", args: []string{"raw4"}},
	{name: "sock_raw6", src: "sock_families.c", args: []string{"raw6"}},
	{name: "sock_netlink", src: "sock_families.c", args: []string{"netlink"}},
	{name: "sock_netlink_queued", src: "sock_families.c", args: []string{"netlink_queued"}, refuse: "netlink socket (protocol 0) with messages waiting in its receive queue"},
	{name: "sock_packet", src: "sock_families.c", args: []string{"packet"}},
	{name: "sock_packet_spkt", src: "sock_families.c", args: []string{"packet_spkt"}},
	{name: "sock_packet_members", src: "sock_families.c", args: []string{"packet_members"}},
	{name: "sock_packet_mapped", src: "sock_families.c", args: []string{"packet_mapped"}, refuse: "a packet socket's mmap ring: its frames and the mapping cannot be restored"},
	{name: "sock_packet_ring", src: "sock_families.c", args: []string{"packet_ring"}, refuse: "packet socket with a receive ring (PACKET_RX_RING) that may hold frames"},
	{name: "sock_raw_queued", src: "sock_families.c", args: []string{"raw_queued"}, refuse: "IPv4 raw socket (protocol 1) with packets waiting in its receive queue"},
	{name: "sock_tcp_acceptq", src: "sock_refused.c", args: []string{"tcp_acceptq"}, refuse: "connections not accepted yet"},
	{name: "sock_unix_acceptq_rights", src: "sock_refused.c", args: []string{"unix_acceptq"}, refuse: "file 1 in flight (SCM_RIGHTS) held by no process of the dump"},
	{name: "sock_unix_external", src: "sock_refused.c", args: []string{"unix_external"}, refuse: "of a process outside the dump"},
	{name: "sock_pending_error", src: "sock_refused.c", args: []string{"pending_error"}, refuse: "a pending socket error"},
	// Refusals: each dump fails by name, the program goes on untouched.
	{name: "fd_shared_table_siblings", src: "fd_shared_table.c", args: []string{"siblings"}, refuse: "(clone CLONE_FILES): file descriptor table shared between processes: cannot be restored"},
	{name: "fd_inotify_deleted_mapped", src: "fd_inotify_deleted.c", args: []string{"mapped", "DIR/"}, refuse: "the watched file was deleted and no fd of the dump holds it"},
	{name: "fd_lease_breaking", src: "fd_leases.c", args: []string{"breaking", "DIR/"}, refuse: "file lease being broken (breaking): cannot be restored"},
	{name: "fd_nsfile_other", src: "fd_nsfile.c", args: []string{"other"}, refuse: "of a uts namespace other than ckpt's"},
	{name: "fd_io_uring", src: "fd_refused.c", args: []string{"io_uring"}, refuse: "fd 4 (anon_inode:[io_uring]): io_uring instance: cannot be restored"},
	{name: "fd_bpf", src: "fd_refused.c", args: []string{"bpf"}, refuse: "fd 4 (anon_inode:bpf-map): bpf object"},
	{name: "fd_perf_event", src: "fd_refused.c", args: []string{"perf_event"}, refuse: "fd 4 (anon_inode:[perf_event]): perf_event: cannot be restored"},
	{name: "fd_fanotify_pending", src: "fd_refused.c", args: []string{"fanotify_pending"}, refuse: "fd 4 (anon_inode:[fanotify]): fanotify group with 24 bytes of events not read yet: cannot be restored"},
	{name: "fd_fanotify_perm", src: "fd_refused.c", args: []string{"fanotify_perm"}, refuse: "fd 4 (anon_inode:[fanotify]): fanotify group of a permission class"},
	{name: "fd_userfaultfd", src: "fd_refused.c", args: []string{"userfaultfd"}, refuse: "fd 4 (anon_inode:[userfaultfd]): userfaultfd: cannot be restored"},
	{name: "fd_sigio_owner", src: "fd_refused.c", args: []string{"sigio_owner"}, refuse: "fd 4: SIGIO goes to process"},
	{name: "fd_inotify_pending", src: "fd_refused.c", args: []string{"inotify_pending"}, refuse: "fd 4 (anon_inode:inotify): inotify instance with"},
	{name: "fd_chroot_deleted", src: "fd_chroot.c", args: []string{"DIR/", "deleted"}, refuse: "root directory (chroot) "},
	{name: "pty_packet_event", src: "pty_refused.c", args: []string{"packet_event"}, lockPtys: true,
		refuse: "a packet-mode status event waits to be read: cannot be restored"},
	{name: "pty_queue_full", src: "pty_refused.c", args: []string{"queue_full"}, lockPtys: true,
		refuse: "input queued towards the slave: 4095 bytes or more: cannot be restored"},
	{name: "pty_ctty_mixed", src: "pty_refused.c", args: []string{"ctty_mixed"}, lockPtys: true,
		refuse: "but has no controlling terminal, while the session's is this one: cannot be restored"},
	{name: "pty_never_opened", src: "pty_refused.c", args: []string{"never_opened"}, lockPtys: true,
		refuse: "its slave was never opened: what was written to the master cannot be read without changing the terminal"},
	{name: "proc_userfaultfd", src: "proc_uffd.c", refuse: "userfaultfd"},
	{name: "mem_shm_unreachable", src: "mem_refused.c", args: []string{"unreachable"}, refuse: "holds data at offset 0x1000 that no mapping of the tree covers: cannot be restored"},
	{name: "mem_sysv_part", src: "mem_refused.c", args: []string{"sysv_part"}, refuse: "attached in part (offset 0x0, 4096 of 8192 bytes): cannot be restored"},
	{name: "mem_sysv_sem", src: "mem_refused.c", args: []string{"sem"}, refuse: "has SEM_UNDO operations"},
	{name: "mem_secret", src: "mem_refused.c", args: []string{"secret"}, refuse: "memfd_secret memory: no one but the process can read it: cannot be restored"},
	{name: "mem_hugetlb_shared", src: "mem_refused.c", args: []string{"hugetlb_shared"}, refuse: "shared hugetlb memory"},
	{name: "proc_rlimit_above_ckpt", src: "proc_rlimit.c", refuse: "RLIMIT_NOFILE: hard limit",
		dumpWrap: []string{"prlimit", "--nofile=1024:1024", "--"}},
	{name: "proc_autogroup", src: "proc_autogroup.c", refuse: "scheduling autogroup /autogroup-"},
	{name: "proc_audit_session", src: "proc_prctl.c", args: []string{"loginuid"}, refuse: "audit session"},
	{name: "proc_oom_score_adj_below_ckpt", src: "proc_prctl.c", refuse: "oom_score_adj: 500 is below ckpt's own 600",
		dumpWrap: []string{"sh", "-c", `echo 600 > /proc/self/oom_score_adj && exec "$0" "$@"`}},
	{name: "proc_caps_outside_ckpt", src: "proc_creds.c", refuse: "capabilities 0x400000 are outside ckpt's own bounding set",
		dumpWrap: []string{"setpriv", "--bounding-set", "-sys_boot", "--"}},
}

// modes are the ways a restorable case is checkpointed before the program
// checks itself.
var modes = []struct {
	name string
	run  func(e *env, t *testing.T, p *prog)
}{
	// One dump that kills the process, then ckpt-redo.
	{"redo", func(e *env, t *testing.T, p *prog) {
		e.dumpKill(t, p)
		e.redo(t, p)
	}},
	// Two dump/restore cycles: what the restore set up must be seen and
	// saved again by the next dump.
	{"redo-twice", func(e *env, t *testing.T, p *prog) {
		for i := 0; i < 2; i++ {
			e.dumpKill(t, p)
			e.redo(t, p)
		}
	}},
	// Two dumps with --leave-running in a row: the original goes on
	// untouched.
	{"leave-running-twice", func(e *env, t *testing.T, p *prog) {
		for i := 0; i < 2; i++ {
			img := filepath.Join(t.TempDir(), "img")
			if res := e.ckpt(t, nil, "dump", "--leave-running", "--dir", img, strconv.Itoa(p.pid)); res.code != 0 {
				t.Fatalf("dump %d --leave-running: %v", i+1, res)
			}
			e.untouched(t, p, fmt.Sprintf("after dump %d --leave-running", i+1))
		}
	}},
}

// TestFidelity runs every case of the table: restorable ones in every
// mode, where the program must then find all its state as it left it;
// refused ones once, where the dump must fail by name and the program,
// untouched, must still pass its own check.
func TestFidelity(t *testing.T) {
	testenv.RequireRoot(t)
	names := map[string]bool{}
	restores := 0
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases are named %q", c.name)
		}
		names[c.name] = true
		if c.refuse == "" {
			restores++
		}
	}
	t.Logf("%d cases: %d must restore exactly (each in %d ways), %d must be refused by name", len(cases), restores, len(modes), len(cases)-restores)
	e := &env{bin: testenv.BuildBinaries(t), r: testenv.StartReaper(t)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.lockPtys {
				testenv.LockPtys(t)
			}
			bin := build(t, c)
			if c.refuse != "" {
				p := e.start(t, c, bin)
				e.refused(t, c, p)
				e.verify(t, p)
				return
			}
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					p := e.start(t, c, bin)
					m.run(e, t, p)
					e.verify(t, p)
				})
			}
		})
	}
}

// env holds the built commands and the reaper the programs run under.
type env struct {
	bin string
	r   *testenv.Reaper
}

// prog is one running case.
type prog struct {
	name string
	pid  int
	dir  string
	log  string
	// from is the number of log lines up to "ready".
	from int
	img  string // the last image dumped
	// beforeRedo is the case's (fcase.beforeRedo).
	beforeRedo func(t *testing.T, dir string)
}

// build compiles the case (once per test run; gcc is quick).
func build(t *testing.T, c fcase) string {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "fidelity")
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(c.src, ".c"))
	args := append([]string{"-Wall", "-Werror", "-Wno-format-truncation", "-O1", "-g", "-pthread", "-I", dir}, c.cflags...)
	args = append(args, "-o", out, filepath.Join(dir, c.src))
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// start runs the case under the reaper and waits for "ready".
func (e *env) start(t *testing.T, c fcase, bin string) *prog {
	t.Helper()
	dir := t.TempDir()
	p := &prog{name: c.name, dir: dir, log: filepath.Join(dir, "log"), beforeRedo: c.beforeRedo}
	argv := []string{bin, p.log}
	for _, a := range c.args {
		if rest, ok := strings.CutPrefix(a, "DIR/"); ok {
			a = filepath.Join(dir, rest)
		}
		argv = append(argv, a)
	}
	p.pid = e.r.Run(t, testenv.RunOpts{Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr"), Dir: dir}, argv...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := testenv.ReadLines(p.log)
		for i, l := range lines {
			switch {
			case l == "ready":
				p.from = i + 1
				return p
			case strings.HasPrefix(l, "SKIP"):
				t.Skipf("%s: %s", c.name, l)
			case strings.HasPrefix(l, "FAIL"):
				t.Fatalf("%s (pid %d) before ready: %s; stderr %q", c.name, p.pid, l, readFile(filepath.Join(dir, "stderr")))
			}
		}
		if es, ok := e.r.Poll(p.pid); ok {
			t.Fatalf("%s (pid %d) ended before ready: %v; log %q; stderr %q", c.name, p.pid, es, lines, readFile(filepath.Join(dir, "stderr")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): no ready line in 10s; log %q", c.name, p.pid, lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verify sends SIGTERM and waits for the program's verdict: PASS, then
// exit code 0.
func (e *env) verify(t *testing.T, p *prog) {
	t.Helper()
	// Through the reaper, not by number: a program that has ended may
	// have left its PID to a process of another test package.
	if !e.r.Signal(t, p.pid, syscall.SIGTERM) {
		es, _ := e.r.Poll(p.pid)
		t.Fatalf("%s: kill -TERM %d: the program has ended already (%v); log %q; stderr %q", p.name, p.pid, es,
			testenv.ReadLines(p.log), readFile(filepath.Join(p.dir, "stderr")))
	}
	es := e.r.WaitExit(t, p.pid, 20*time.Second)
	lines := testenv.ReadLines(p.log)
	after := lines[min(p.from, len(lines)):]
	verdict := strings.Join(after, " | ")
	if len(after) == 0 || after[len(after)-1] != "PASS" {
		t.Errorf("%s (pid %d): %s; stderr %q", p.name, p.pid, verdictOrNone(verdict), readFile(filepath.Join(p.dir, "stderr")))
	}
	if es != (testenv.ExitStatus{Pid: p.pid}) {
		t.Errorf("%s: %v after SIGTERM, want exit code 0", p.name, es)
	}
}

func verdictOrNone(v string) string {
	if v == "" {
		return "no verdict in the log after SIGTERM"
	}
	return "after SIGTERM: " + v
}

// dumpKill dumps the program (killing it) and takes the reaper's report.
func (e *env) dumpKill(t *testing.T, p *prog) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	if res := e.ckpt(t, nil, "dump", "--dir", img, strconv.Itoa(p.pid)); res.code != 0 {
		t.Fatalf("ckpt dump %d: %v", p.pid, res)
	}
	if es := e.r.WaitExit(t, p.pid, 10*time.Second); es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("%s: after dump: %v, want killed by SIGKILL", p.name, es)
	}
	p.img = img
	return img
}

// redo restores the last image of p through the reaper; it must give
// back the same PID.
func (e *env) redo(t *testing.T, p *prog) {
	t.Helper()
	if p.beforeRedo != nil {
		p.beforeRedo(t, p.dir)
	}
	d := t.TempDir()
	out, errf := filepath.Join(d, "redo.out"), filepath.Join(d, "redo.err")
	pid := e.r.Run(t, testenv.RunOpts{Stdout: out, Stderr: errf}, filepath.Join(e.bin, "ckpt-redo"), p.img)
	es := e.r.WaitExit(t, pid, 30*time.Second)
	if es != (testenv.ExitStatus{Pid: pid}) {
		t.Fatalf("ckpt-redo %s: %v; stdout %q; stderr %q", p.img, es, readFile(out), readFile(errf))
	}
	// Alive also makes the reaper forget the exit reports of earlier
	// processes with this PID (PIDs wrap within minutes), which verify's
	// WaitExit would otherwise take for the restored program's.
	if !e.r.Alive(p.pid) {
		t.Fatalf("ckpt-redo succeeded but pid %d is not a process under the reaper", p.pid)
	}
}

// refused runs a dump that must fail naming the process and c.refuse, and
// checks that the program goes on untouched, with no image left.
func (e *env) refused(t *testing.T, c fcase, p *prog) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "img")
	args := []string{"dump", "--dir", img, strconv.Itoa(p.pid)}
	res := e.ckpt(t, c.dumpWrap, args...)
	if res.code == 0 {
		t.Fatalf("ckpt dump of %s succeeded, want it refused with %q; stderr %q", c.name, c.refuse, res.stderr)
	}
	for _, want := range []string{c.refuse, fmt.Sprintf("process %d", p.pid)} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("ckpt dump: stderr %q, want it to say %q", res.stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(img, "image.ckpt")); err == nil {
		t.Errorf("the refused dump left an image")
	}
	e.untouched(t, p, "after the refused dump")
}

// untouched checks that the program runs on: not traced, not stopped, no
// exit reported. A process whose leader has exited (a zombie thread) is
// looked at through its first live thread.
func (e *env) untouched(t *testing.T, p *prog, why string) {
	t.Helper()
	if es, ok := e.r.Poll(p.pid); ok {
		t.Fatalf("%s: %s ended: %v", why, p.name, es)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		id := liveTask(p.pid)
		tp, st := statusField(id, "TracerPid"), statusField(id, "State")
		if tp == "0" && (strings.HasPrefix(st, "S") || strings.HasPrefix(st, "R")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s (pid %d): TracerPid %q, State %q, want untraced and running or sleeping", why, p.name, p.pid, tp, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// result is how a command ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit code %d; stdout %q; stderr %q", r.code, r.stdout, r.stderr)
}

// ckpt runs BIN/ckpt args, under the wrap command line if any.
func (e *env) ckpt(t *testing.T, wrap []string, args ...string) result {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), filepath.Join(e.bin, "ckpt")), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
		if res.code == 0 {
			res.code = -1
		}
	default:
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return res
}

// liveTask is pid, or, if its leader is a zombie thread, the first of its
// other threads.
func liveTask(pid int) int {
	if !strings.HasPrefix(statusField(pid, "State"), "Z") {
		return pid
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			return tid
		}
	}
	return pid
}

func statusField(pid int, name string) string {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// removeMsgQueues removes the System V message queues whose ids the
// mem_sysv_msg case wrote to DIR/msqids.
func removeMsgQueues(t *testing.T, dir string) {
	t.Helper()
	for _, f := range strings.Fields(readFile(filepath.Join(dir, "msqids"))) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("msqids: %q", f)
		}
		if err := sys.MsgRemove(id); err != nil {
			t.Fatalf("remove message queue %d: %v", id, err)
		}
	}
}

// TestCOWImageSize dumps mem_cow (64 MiB filled by the main process,
// shared copy-on-write with 3 children, one of which wrote 256 pages):
// the image holds the 64 MiB about once, not four times, the children's
// pages being stored as their parent's; the restored tree then passes its
// own check (pages shared again).
func TestCOWImageSize(t *testing.T) {
	testenv.RequireRoot(t)
	e := &env{bin: testenv.BuildBinaries(t), r: testenv.StartReaper(t)}
	var c fcase
	for _, x := range cases {
		if x.name == "mem_cow" {
			c = x
		}
	}
	p := e.start(t, c, build(t, c))
	img := e.dumpKill(t, p)
	fi, err := os.Stat(filepath.Join(img, "image.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	if fi.Size() > 72*mib {
		t.Errorf("image of %d MiB, want about 64 (+256 pages of child 0): shared pages stored more than once", fi.Size()/mib)
	}
	t.Logf("image %.1f MiB for 4 processes sharing 64 MiB", float64(fi.Size())/mib)
	res := e.ckpt(t, nil, "show", "--json", img)
	var show struct {
		ParentPages int64 `json:"parent_pages"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &show); res.code != 0 || err != nil {
		t.Fatalf("ckpt show --json: %v: %v", res, err)
	}
	// 3 children of 16384 pages, less those they wrote, dropped or zeroed.
	if want := int64(3*16384 - 256 - 100 - 11); show.ParentPages < want {
		t.Errorf("ckpt show: %d pages stored as the parent's, want at least %d", show.ParentPages, want)
	}
	e.redo(t, p)
	e.verify(t, p)
}
