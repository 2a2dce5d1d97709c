package restore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// The System V message queues the tree used are in the image with their
// messages. A queue lives in the IPC namespace, not in a process: after a
// killing dump on the same machine it is still there, and is left alone if
// nothing touched it since (every field msgctl IPC_STAT shows, and every
// message, the same). Gone (restored elsewhere, or removed), it is made
// again with its old id (through /proc/sys/kernel/msg_next_id), key,
// creator, owner, mode and byte limit, and its messages are sent again by
// the process that sent last, after the one that received last received a
// message of its own: so that the last sender and receiver are right.
// Only its times (of the last send, receive and change) are the restore's.
// Anything else is refused by name: a queue changed since the dump, an id
// or key taken by another, a last sender or receiver outside the dump.

// sysvMsgQueues gives the tree its message queues back.
func (t *tree) sysvMsgQueues() error {
	for i := range t.img.hdr.SysVMsg {
		q := &t.img.hdr.SysVMsg[i]
		name := fmt.Sprintf("SysV message queue %d (key %#x)", q.ID, uint32(q.Key))
		ds, err := sys.MsgStat(q.ID)
		switch {
		case err == nil:
			if err := sameQueue(q, ds); err != nil {
				return fmt.Errorf("%s: %w: %w", name, err, ErrSysV)
			}
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIDRM):
			if err := t.makeQueue(q); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		default:
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// sameQueue says how queue ds differs from q as it was dumped, or nil.
func sameQueue(q *image.SysVMsgQueue, ds *sys.MsqidDS) error {
	switch {
	case ds.Perm.Key != q.Key:
		return fmt.Errorf("the id now names another queue (key %#x)", uint32(ds.Perm.Key))
	case ds.QNum != uint64(len(q.Messages)) || sys.PID(ds.LSPID) != q.LSPID || sys.PID(ds.LRPID) != q.LRPID ||
		ds.STime != q.STime || ds.RTime != q.RTime:
		return fmt.Errorf("used since the dump (%d messages, last sent by %d, received by %d; it held %d, %d, %d)",
			ds.QNum, ds.LSPID, ds.LRPID, len(q.Messages), q.LSPID, q.LRPID)
	case ds.CTime != q.CTime || ds.Perm.Mode&0o777 != q.Mode || ds.Perm.Uid != q.UID || ds.Perm.Gid != q.GID || ds.QBytes != q.QBytes:
		return fmt.Errorf("changed since the dump (owner %d:%d mode %#o limit %d; it had %d:%d %#o %d)",
			ds.Perm.Uid, ds.Perm.Gid, ds.Perm.Mode&0o777, ds.QBytes, q.UID, q.GID, q.Mode, q.QBytes)
	}
	for i, m := range q.Messages {
		typ, text, err := sys.MsgPeek(q.ID, i, int(ds.QBytes))
		if err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		if typ != m.Type || !bytes.Equal(text, m.Text) {
			return fmt.Errorf("message %d changed since the dump", i)
		}
	}
	return nil
}

// makeQueue creates queue q again, with its id, and refills it.
func (t *tree) makeQueue(q *image.SysVMsgQueue) error {
	if q.Key != unix.IPC_PRIVATE {
		if id, err := sys.MsgGet(q.Key, 0); err == nil {
			return fmt.Errorf("the key now names queue %d: %w", id, ErrSysV)
		}
	}
	// The processes that sent and received last must be in the tree to
	// do it again.
	sender, receiver := t.byPID[q.LSPID], t.byPID[q.LRPID]
	if (q.LSPID != 0 && sender == nil) || (q.LRPID != 0 && receiver == nil) {
		return fmt.Errorf("it must be made again, and its last sender %d or receiver %d is not in the image: %w", q.LSPID, q.LRPID, ErrSysV)
	}
	if len(q.Messages) == 0 && q.LSPID != 0 && q.LRPID == 0 {
		return fmt.Errorf("no messages but a last sender and no receiver: %w", image.ErrInvalid)
	}
	if err := os.WriteFile("/proc/sys/kernel/msg_next_id", []byte(strconv.Itoa(q.ID)), 0); err != nil {
		return fmt.Errorf("set msg_next_id: %w", err)
	}
	id, err := asCreator(q.CUID, q.CGID, func() (int, error) {
		return sys.MsgGet(q.Key, unix.IPC_CREAT|unix.IPC_EXCL|int(q.Mode&0o777))
	})
	if err != nil {
		return fmt.Errorf("msgget: %w", err)
	}
	t.sysvMsgMade = append(t.sysvMsgMade, id) // removed again if the restore fails
	if id != q.ID {
		return fmt.Errorf("made again with id %d (another queue took the id meanwhile): %w", id, ErrSysV)
	}
	ds, err := sys.MsgStat(id)
	if err != nil {
		return err
	}
	ds.Perm.Uid, ds.Perm.Gid, ds.Perm.Mode, ds.QBytes = q.UID, q.GID, q.Mode, q.QBytes
	if err := sys.MsgSet(id, ds); err != nil {
		return err
	}
	if receiver != nil {
		if err := receiver.msgSend(id, image.SysVMsg{Type: 1}); err != nil {
			return err
		}
		if err := receiver.msgReceive(id); err != nil {
			return err
		}
	}
	for _, m := range q.Messages {
		if err := sender.msgSend(id, m); err != nil {
			return err
		}
	}
	if len(q.Messages) == 0 && sender != nil {
		// The last message sent was received: send one and take it.
		if err := sender.msgSend(id, image.SysVMsg{Type: 1}); err != nil {
			return err
		}
		if err := receiver.msgReceive(id); err != nil {
			return err
		}
	}
	if ds, err = sys.MsgStat(id); err != nil {
		return err
	}
	if sys.PID(ds.LSPID) != q.LSPID || sys.PID(ds.LRPID) != q.LRPID || ds.QNum != uint64(len(q.Messages)) {
		return fmt.Errorf("made again: %d messages, last sent by %d, received by %d; want %d, %d, %d",
			ds.QNum, ds.LSPID, ds.LRPID, len(q.Messages), q.LSPID, q.LRPID)
	}
	return nil
}

// msgSend sends m to queue id from the process being built (msgsnd).
func (b *builder) msgSend(id int, m image.SysVMsg) error {
	buf := binary.LittleEndian.AppendUint64(nil, uint64(m.Type))
	if err := b.write(scratchOff, append(buf, m.Text...)); err != nil {
		return fmt.Errorf("message of %d bytes: %w", len(m.Text), err)
	}
	_, err := b.call(fmt.Sprintf("msgsnd to queue %d", id), unix.SYS_MSGSND, uint64(id), b.gadget+scratchOff, uint64(len(m.Text)), unix.IPC_NOWAIT)
	return err
}

// msgReceive takes the first message of queue id in the process being
// built (msgrcv), which must be an empty one.
func (b *builder) msgReceive(id int) error {
	n, err := b.call(fmt.Sprintf("msgrcv from queue %d", id), unix.SYS_MSGRCV, uint64(id), b.gadget+scratchOff, 0, 0, unix.IPC_NOWAIT)
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("msgrcv from queue %d: %d bytes, want the empty message", id, n)
	}
	return nil
}
