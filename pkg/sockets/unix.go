package sockets

import (
	"encoding/binary"
	"strings"

	"golang.org/x/sys/unix"
)

// UnixInfo is what sock_diag says about a UNIX socket.
type UnixInfo struct {
	Ino     uint32
	Type    int
	State   int
	Peer    uint32 // inode of the peer, 0 if none
	Name    string // bound name ("" unnamed, "@..." abstract)
	Pending int    // connections waiting (listeners), or queued bytes
	Backlog int    // listen backlog
	// Shutdown is sk_shutdown: 1 receive side shut, 2 send side, 3 both.
	Shutdown int
	// Icons are, for a listener, the inodes of the clients whose
	// connections wait to be accepted, in order.
	Icons []uint32
	// VFSIno and VFSDev identify the file a socket bound to a path made
	// (the kernel's dev_t: major << 20 | minor); 0 for others.
	VFSIno, VFSDev uint32
}

const (
	sockDiagByFamily = 20
	udiagShowName    = 0x01
	udiagShowVFS     = 0x02
	unixDiagVFS      = 1
	udiagShowPeer    = 0x04
	udiagShowIcons   = 0x08
	udiagShowRqlen   = 0x10
	unixDiagName     = 0
	unixDiagPeer     = 2
	unixDiagIcons    = 3
	unixDiagRqlen    = 4
	unixDiagShutdown = 6
)

// UnixSockets lists the UNIX sockets of the caller's network namespace,
// by inode, through sock_diag.
func UnixSockets() (map[uint32]UnixInfo, error) {
	req := diagRequest(16+24, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	le := binary.LittleEndian
	req[16] = unix.AF_UNIX
	le.PutUint32(req[20:], 0xffffffff) // every state
	le.PutUint32(req[28:], udiagShowName|udiagShowVFS|udiagShowPeer|udiagShowIcons|udiagShowRqlen)
	le.PutUint32(req[32:], 0xffffffff) // cookie: none
	le.PutUint32(req[36:], 0xffffffff)
	out := map[uint32]UnixInfo{}
	err := sockDiagDump(-1, req, func(d []byte) bool {
		if len(d) < 16 {
			return false
		}
		info := UnixInfo{Type: int(d[1]), State: int(d[2]), Ino: le.Uint32(d[4:])}
		diagAttrs(d[16:], func(typ uint16, v []byte) {
			switch typ {
			case unixDiagName:
				if len(v) > 0 && v[0] == 0 {
					info.Name = "@" + string(v[1:])
				} else {
					info.Name = strings.TrimRight(string(v), "\x00")
				}
			case unixDiagVFS:
				if len(v) >= 8 {
					info.VFSIno, info.VFSDev = le.Uint32(v), le.Uint32(v[4:])
				}
			case unixDiagPeer:
				if len(v) >= 4 {
					info.Peer = le.Uint32(v)
				}
			case unixDiagIcons:
				for i := 0; i+4 <= len(v); i += 4 {
					info.Icons = append(info.Icons, le.Uint32(v[i:]))
				}
			case unixDiagShutdown:
				if len(v) >= 1 {
					info.Shutdown = int(v[0])
				}
			case unixDiagRqlen:
				if len(v) >= 8 {
					info.Pending = int(le.Uint32(v))
					info.Backlog = int(le.Uint32(v[4:]))
				}
			}
		})
		out[info.Ino] = info
		return false
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UnixListenState is the state sock_diag gives a listening UNIX socket.
const UnixListenState = 10

// unixAddr converts a name as sock_diag gives it; x/sys/unix takes a
// leading "@" as an abstract name, as sock_diag writes it.
func unixAddr(name string) *unix.SockaddrUnix { return &unix.SockaddrUnix{Name: name} }
