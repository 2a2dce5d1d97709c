package fdkind

import (
	"os"
	"testing"

	"github.com/ckpt/ckpt/pkg/image"
	"github.com/ckpt/ckpt/pkg/rewrite"
	"github.com/ckpt/ckpt/pkg/sockets"
	"golang.org/x/sys/unix"
)

func TestShowSocket(t *testing.T) {
	for _, tc := range []struct {
		s    image.Socket
		want string
	}{
		{image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Peer: 7}, "unix stream, connected to socket 7"},
		{image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, State: sockets.StateListen, Local: "@l", AcceptQueue: []uint32{5, 0}, Orphans: []image.Waiting{{}}}, "unix stream @l listening, 2 waiting to be accepted (1 from a closed client)"},
		{image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, AcceptOf: 4, Waiting: &image.Waiting{Msgs: []int{1, 2}}}, "unix stream, waiting in the accept queue of socket 4, 2 pieces sent"},
		{image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_SEQPACKET, AcceptOf: 4, Local: "@c"}, "unix seqpacket @c, waiting in the accept queue of socket 4"},
		{image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_DGRAM, Local: "/run/x.sock"}, "unix dgram /run/x.sock"},
		{image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Local: "1.2.3.4:5", Remote: "6.7.8.9:10", TCP: &image.TCPRepair{}}, "tcp 1.2.3.4:5 -> 6.7.8.9:10 established, 0 bytes unsent"},
		{image.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, State: 10, Local: "0.0.0.0:80", Backlog: 5}, "tcp 0.0.0.0:80 listening, backlog 5"},
		{image.Socket{Family: unix.AF_INET, Type: unix.SOCK_DGRAM, Protocol: unix.IPPROTO_UDP, Local: "0.0.0.0:53"}, "udp 0.0.0.0:53"},
	} {
		if got := ShowSocket(&tc.s); got != tc.want {
			t.Errorf("ShowSocket(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

// pairEnv is a restore environment holding the two ends of a UNIX pair.
type pairEnv struct {
	restoreEnv
	files map[uint32]*image.File
}

func (p pairEnv) Sockets() SocketRestoreEnv   { return p }
func (p pairEnv) Rules() *rewrite.Rules       { return nil }
func (p pairEnv) Peer(ino uint32) *image.File { return p.files[ino] }
func (p pairEnv) Named(name string) []*image.File {
	var out []*image.File
	for _, f := range p.files {
		if f.Socket.Local == name {
			out = append(out, f)
		}
	}
	return out
}
func (p pairEnv) Repairing(f *os.File, s *image.Socket, sendQ []byte) {}
func (p pairEnv) Finally(fn func() error)                             {}
func (p pairEnv) SYNsDropped() bool                                   { return false }

// TestUnixPairRestore: both ends of a connected UNIX stream pair are
// built once, each with the messages that were queued to it.
func TestUnixPairRestore(t *testing.T) {
	env := newTestEnv(t)
	a := &image.File{ID: 1, Kind: image.FileSocket, Flags: unix.O_RDWR, Socket: &image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Ino: 10, Peer: 11,
		RecvMsgs: []int{env.AddData([]byte("to a"))}}}
	b := &image.File{ID: 2, Kind: image.FileSocket, Flags: unix.O_RDWR | unix.O_NONBLOCK, Socket: &image.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Ino: 11, Peer: 10}}
	pe := pairEnv{restoreEnv{env}, map[uint32]*image.File{10: a, 11: b}}
	k, _ := Lookup(image.FileSocket)
	open := func(f *image.File) *os.File {
		d, err := k.Open(pe, f, Where{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.File.Close() })
		if err := Settle(f, d.File); err != nil {
			t.Fatal(err)
		}
		return d.File
	}
	fa, fb := open(a), open(b)
	env.runSteps(t)
	pairs := 0
	for k := range env.once {
		if _, ok := k.(unixPairKey); ok {
			pairs++
		}
	}
	if pairs != 1 {
		t.Errorf("the pair was built %d times", pairs)
	}
	buf := make([]byte, 16)
	if n, err := unix.Read(int(fa.Fd()), buf); err != nil || string(buf[:n]) != "to a" {
		t.Errorf("end a reads %q, %v", buf[:max(n, 0)], err)
	}
	if _, err := unix.Read(int(fb.Fd()), buf); err != unix.EAGAIN {
		t.Errorf("end b (empty, non-blocking): %v, want EAGAIN", err)
	}
	if _, err := fa.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(int(fb.Fd()), buf); err != nil || string(buf[:n]) != "hi" {
		t.Errorf("end b reads %q, %v", buf[:max(n, 0)], err)
	}
}
