package sockets

import (
	"unsafe"

	"github.com/ckpt/ckpt/internal/sys"
	"golang.org/x/sys/unix"
)

// Exported for the external tests (package sockets_test), which also use
// pkg/netlock (which imports this package).

// InjectFIN forges the peer's FIN to the local end of a connection, as
// the restore replays it.
func InjectFIN(st *TCPState, seq, ack uint32) error {
	return inject(tcpSegment{from: st.Remote, to: st.Local, seq: seq, ack: ack, flags: tcpFlagFIN | tcpFlagACK, window: 512})
}

// RepairWindow reads TCP_REPAIR_WINDOW (repair mode).
func RepairWindow(fd int) ([5]uint32, error) {
	var w [5]uint32
	_, err := sys.Getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW, unsafe.Pointer(&w), unsafe.Sizeof(w))
	return w, err
}
