package sockets

// Exported for the external tests (package sockets_test), which also use
// pkg/netlock (which imports this package).

// InjectFIN forges the peer's FIN to the local end of a connection, as
// the restore replays it.
func InjectFIN(st *TCPState, seq, ack uint32) error {
	return inject(tcpSegment{from: st.Remote, to: st.Local, seq: seq, ack: ack, flags: tcpFlagFIN | tcpFlagACK, window: 512})
}
