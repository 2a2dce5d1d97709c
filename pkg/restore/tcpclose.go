package restore

import (
	"slices"

	"github.com/ckpt/ckpt/pkg/netlock"
	"github.com/ckpt/ckpt/pkg/sockets"
)

// closeConnections makes every TCP connection of the image a socket whose
// connection ended (Options.TCPClose, sockets.CloseConnection).
func closeConnections(img *imageMeta) {
	for _, p := range img.procs {
		for i := range p.Files {
			sockets.CloseConnection(p.Files[i].Socket)
		}
	}
}

// adoptDumpLock makes the dump's network lock, if it is in this network
// namespace, this restore's to lift on Release: with --tcp-close no
// connection needs it any more, and left alone it would black-hole the
// ports of the closed connections.
func (t *tree) adoptDumpLock() error {
	if t.img.hdr.NetLock == "" {
		return nil
	}
	tables, err := netlock.Tables()
	if err != nil {
		return err
	}
	if slices.Contains(tables, t.img.hdr.NetLock) {
		t.lock = t.img.hdr.NetLock
	}
	return nil
}
