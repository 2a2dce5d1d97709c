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
	type field struct {
		dst  *uint32
		st   string
		size uint32
		path []string
	}
	var sockIn, inodeIn, iIno uint32
	fields := []field{
		{&sockIn, "unix_sock", 0, []string{"sk"}},
		{&l.state, "sock", 1, []string{"__sk_common", "skc_state"}},
		{&l.typ, "sock", 2, []string{"sk_type"}},
		{&l.shutdown, "sock", 1, []string{"sk_shutdown"}},
		{&l.err, "sock", 4, []string{"sk_err"}},
		{&l.socket, "sock", 8, []string{"sk_socket"}},
		{&l.rq, "sock", 24, []string{"sk_receive_queue"}},
		{&l.peerPID, "sock", 8, []string{"sk_peer_pid"}},
		{&l.peerCred, "sock", 8, []string{"sk_peer_cred"}},
		{&l.peer, "unix_sock", 8, []string{"peer"}},
		{&l.addr, "unix_sock", 8, []string{"addr"}},
		{&inodeIn, "socket_alloc", 0, []string{"vfs_inode"}},
		{&iIno, "inode", 8, []string{"i_ino"}},
		{&l.skbNext, "sk_buff", 8, []string{"next"}},
		{&l.skbSk, "sk_buff", 8, []string{"sk"}},
		{&l.skbCB, "sk_buff", 48, []string{"cb"}},
		{&l.skbLen, "sk_buff", 4, []string{"len"}},
		{&l.skbDataLen, "sk_buff", 4, []string{"data_len"}},
		{&l.skbHead, "sk_buff", 8, []string{"head"}},
		{&l.skbEnd, "sk_buff", 4, []string{"end"}},
		{&l.skbData, "sk_buff", 8, []string{"data"}},
		{&l.cbPID, "unix_skb_parms", 8, []string{"pid"}},
		{&l.cbUID, "unix_skb_parms", 4, []string{"uid"}},
		{&l.cbGID, "unix_skb_parms", 4, []string{"gid"}},
		{&l.cbFP, "unix_skb_parms", 8, []string{"fp"}},
		{&l.cbConsumed, "unix_skb_parms", 4, []string{"consumed"}},
		{&l.pidLevel, "pid", 4, []string{"level"}},
		{&l.pidNumbers, "pid", 0, []string{"numbers"}},
		{&l.credEUID, "cred", 4, []string{"euid"}},
		{&l.credEGID, "cred", 4, []string{"egid"}},
		{&l.credGroups, "cred", 8, []string{"group_info"}},
		{&l.groupsN, "group_info", 4, []string{"ngroups"}},
		{&l.groupsGID, "group_info", 0, []string{"gid"}},
		{&l.shinfoNrFrags, "skb_shared_info", 1, []string{"nr_frags"}},
		{&l.shinfoFragList, "skb_shared_info", 8, []string{"frag_list"}},
		{&l.shinfoFrags, "skb_shared_info", 0, []string{"frags"}},
		{&l.fragNetmem, "skb_frag", 8, []string{"netmem"}},
		{&l.fragLen, "skb_frag", 4, []string{"len"}},
		{&l.fragOff, "skb_frag", 4, []string{"offset"}},
		{&l.addrLen, "unix_address", 4, []string{"len"}},
		{&l.addrName, "unix_address", 0, []string{"name"}},
		{&l.fpCount, "scm_fp_list", 2, []string{"count"}},
		{&l.fpFiles, "scm_fp_list", 0, []string{"fp"}},
		{&l.tgid, "task_struct", 4, []string{"tgid"}},
		{&l.itfTask, "bpf_iter__task_file", 8, []string{"task"}},
		{&l.itfFD, "bpf_iter__task_file", 4, []string{"fd"}},
		{&l.itfFile, "bpf_iter__task_file", 8, []string{"file"}},
	}
	if _, _, err := member(st["unix_sock"], "oob_skb"); err == nil {
		l.hasOOB = true
		fields = append(fields, field{&l.oob, "unix_sock", 8, []string{"oob_skb"}})
	}
	var upidNr uint32
	fields = append(fields, field{&upidNr, "upid", 4, []string{"nr"}})
	for _, f := range fields {
		if *f.dst, err = byteOff(st[f.st], f.size, f.path...); err != nil {
			return nil, err
		}
	}
	if sockIn != 0 || upidNr != 0 || l.cbConsumed+4 > 48 {
		return nil, fmt.Errorf("unix_sock.sk at %d, upid.nr at %d, unix_skb_parms of %d bytes: %w", sockIn, upidNr, l.cbConsumed+4, errLayout)
	}
	l.inode = inodeIn + iIno
	return l, nil
}
