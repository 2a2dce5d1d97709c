package bpftask

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// unixLayout holds where, in this kernel's structures, the fields the
// UNIX accept queue reader decodes are (byte offsets from the kernel's
// BTF).
type unixLayout struct {
	unixSockSize uint32
	// struct sock (at the start of struct unix_sock)
	state, typ, shutdown, err      uint32
	socket, rq, peerPID, peerCred  uint32
	peer, addr, oob                uint32 // in struct unix_sock; oob 0: none
	hasOOB                         bool
	inode                          uint32 // i_ino from a struct socket: socket_alloc.vfs_inode + inode.i_ino
	skbSize                        uint32
	skbNext, skbSk, skbCB          uint32
	skbLen, skbDataLen             uint32
	skbHead, skbEnd, skbData       uint32
	cbPID, cbUID, cbGID, cbFP      uint32 // struct unix_skb_parms, in skb->cb
	cbConsumed                     uint32
	pidLevel, pidNumbers, upidSize uint32 // struct pid, struct upid (nr first)
	credEUID, credEGID, credGroups uint32
	groupsN, groupsGID             uint32 // struct group_info
	shinfoNrFrags, shinfoFragList  uint32 // struct skb_shared_info
	shinfoFrags, fragSize          uint32
	fragNetmem, fragLen, fragOff   uint32 // skb_frag_t
	pageSize                       uint32 // sizeof(struct page)
	addrLen, addrName              uint32 // struct unix_address
	fpCount, fpFiles               uint32 // struct scm_fp_list: count, fp[]
	tgid                           uint32 // task_struct.tgid
	itfTask, itfFD, itfFile        uint32 // struct bpf_iter__task_file
}

// loadUnixLayout reads the offsets from the kernel's BTF s.
func loadUnixLayout(s *btf.Spec) (*unixLayout, error) {
	var err error
	st := map[string]*btf.Struct{}
	for _, n := range []string{"unix_sock", "sock", "socket_alloc", "inode", "sk_buff", "unix_skb_parms", "pid", "upid", "cred", "group_info", "skb_shared_info", "skb_frag", "page", "unix_address", "scm_fp_list", "task_struct", "bpf_iter__task_file"} {
		if st[n], err = structType(s, n); err != nil {
			return nil, err
		}
	}
	if _, err := structType(s, "bpf_iter__unix"); err != nil {
		return nil, fmt.Errorf("no BPF UNIX socket iterator: %w", err)
	}
	if l := st["task_struct"].Size; l > 1<<15 {
		return nil, fmt.Errorf("task_struct of %d bytes: %w", l, errLayout)
	}
	l := &unixLayout{unixSockSize: st["unix_sock"].Size, skbSize: st["sk_buff"].Size, upidSize: st["upid"].Size,
		fragSize: st["skb_frag"].Size, pageSize: st["page"].Size}
	var sockIn, inodeIn, iIno uint32
	fields := []offset{
		{&sockIn, st["unix_sock"], 0, []string{"sk"}},
		{&l.state, st["sock"], 1, []string{"__sk_common", "skc_state"}},
		{&l.typ, st["sock"], 2, []string{"sk_type"}},
		{&l.shutdown, st["sock"], 1, []string{"sk_shutdown"}},
		{&l.err, st["sock"], 4, []string{"sk_err"}},
		{&l.socket, st["sock"], 8, []string{"sk_socket"}},
		{&l.rq, st["sock"], 24, []string{"sk_receive_queue"}},
		{&l.peerPID, st["sock"], 8, []string{"sk_peer_pid"}},
		{&l.peerCred, st["sock"], 8, []string{"sk_peer_cred"}},
		{&l.peer, st["unix_sock"], 8, []string{"peer"}},
		{&l.addr, st["unix_sock"], 8, []string{"addr"}},
		{&inodeIn, st["socket_alloc"], 0, []string{"vfs_inode"}},
		{&iIno, st["inode"], 8, []string{"i_ino"}},
		{&l.skbNext, st["sk_buff"], 8, []string{"next"}},
		{&l.skbSk, st["sk_buff"], 8, []string{"sk"}},
		{&l.skbCB, st["sk_buff"], 48, []string{"cb"}},
		{&l.skbLen, st["sk_buff"], 4, []string{"len"}},
		{&l.skbDataLen, st["sk_buff"], 4, []string{"data_len"}},
		{&l.skbHead, st["sk_buff"], 8, []string{"head"}},
		{&l.skbEnd, st["sk_buff"], 4, []string{"end"}},
		{&l.skbData, st["sk_buff"], 8, []string{"data"}},
		{&l.cbPID, st["unix_skb_parms"], 8, []string{"pid"}},
		{&l.cbUID, st["unix_skb_parms"], 4, []string{"uid"}},
		{&l.cbGID, st["unix_skb_parms"], 4, []string{"gid"}},
		{&l.cbFP, st["unix_skb_parms"], 8, []string{"fp"}},
		{&l.cbConsumed, st["unix_skb_parms"], 4, []string{"consumed"}},
		{&l.pidLevel, st["pid"], 4, []string{"level"}},
		{&l.pidNumbers, st["pid"], 0, []string{"numbers"}},
		{&l.credEUID, st["cred"], 4, []string{"euid"}},
		{&l.credEGID, st["cred"], 4, []string{"egid"}},
		{&l.credGroups, st["cred"], 8, []string{"group_info"}},
		{&l.groupsN, st["group_info"], 4, []string{"ngroups"}},
		{&l.groupsGID, st["group_info"], 0, []string{"gid"}},
		{&l.shinfoNrFrags, st["skb_shared_info"], 1, []string{"nr_frags"}},
		{&l.shinfoFragList, st["skb_shared_info"], 8, []string{"frag_list"}},
		{&l.shinfoFrags, st["skb_shared_info"], 0, []string{"frags"}},
		{&l.fragNetmem, st["skb_frag"], 8, []string{"netmem"}},
		{&l.fragLen, st["skb_frag"], 4, []string{"len"}},
		{&l.fragOff, st["skb_frag"], 4, []string{"offset"}},
		{&l.addrLen, st["unix_address"], 4, []string{"len"}},
		{&l.addrName, st["unix_address"], 0, []string{"name"}},
		{&l.fpCount, st["scm_fp_list"], 2, []string{"count"}},
		{&l.fpFiles, st["scm_fp_list"], 0, []string{"fp"}},
		{&l.tgid, st["task_struct"], 4, []string{"tgid"}},
		{&l.itfTask, st["bpf_iter__task_file"], 8, []string{"task"}},
		{&l.itfFD, st["bpf_iter__task_file"], 4, []string{"fd"}},
		{&l.itfFile, st["bpf_iter__task_file"], 8, []string{"file"}},
	}
	if _, _, err := member(st["unix_sock"], "oob_skb"); err == nil {
		l.hasOOB = true
		fields = append(fields, offset{&l.oob, st["unix_sock"], 8, []string{"oob_skb"}})
	}
	var upidNr uint32
	fields = append(fields, offset{&upidNr, st["upid"], 4, []string{"nr"}})
	if err := setOffsets(fields); err != nil {
		return nil, err
	}
	if sockIn != 0 || upidNr != 0 || l.cbConsumed+4 > 48 {
		return nil, fmt.Errorf("unix_sock.sk at %d, upid.nr at %d, unix_skb_parms of %d bytes: %w", sockIn, upidNr, l.cbConsumed+4, errLayout)
	}
	l.inode = inodeIn + iIno
	return l, nil
}
