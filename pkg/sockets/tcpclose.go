package sockets

import "github.com/ckpt/ckpt/pkg/image"

// CloseConnection turns the image of a TCP connection into that of a
// socket whose connection ended (ckpt-redo --tcp-close: for a process moved
// where its peers cannot follow): a new socket, in state CLOSE, shut down
// both ways, as the kernel leaves a connection that ended. The program
// reads end of file and gets EPIPE when it writes; its options stay. The
// queues are dropped, its name too (the port of a connection that ended
// is given back). Other sockets are left alone.
func CloseConnection(s *image.Socket) {
	if s == nil || s.TCP == nil || s.State == tcpClose {
		return // not a connection, or one that had ended already
	}
	s.TCP = nil
	s.State = tcpClose
	s.Local, s.Remote = "", ""
	s.RecvDataID, s.SendDataID = 0, 0
	s.Shutdown = 3
}
