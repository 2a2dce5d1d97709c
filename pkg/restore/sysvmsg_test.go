package restore

import (
	"strings"
	"testing"

	"github.com/ckpt/ckpt/internal/sys"
	"github.com/ckpt/ckpt/pkg/image"
	"golang.org/x/sys/unix"
)

// TestSameQueue: a message queue left alone since the dump is taken as it
// is; one used or changed since is refused, saying how.
func TestSameQueue(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, id int)
		want   string // "" for the same queue
	}{
		{"untouched", func(*testing.T, int) {}, ""},
		{"a message more", func(t *testing.T, id int) { send(t, id, 5, "more") }, "used since the dump (3 messages"},
		{"mode", func(t *testing.T, id int) {
			ds, err := sys.MsgStat(id)
			if err != nil {
				t.Fatal(err)
			}
			ds.Perm.Mode = 0o644
			if err := sys.MsgSet(id, ds); err != nil {
				t.Fatal(err)
			}
		}, "changed since the dump (owner 0:0 mode 0644"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := sys.MsgGet(unix.IPC_PRIVATE, unix.IPC_CREAT|0o600)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sys.MsgRemove(id) })
			send(t, id, 1, "one")
			send(t, id, 2, "")
			ds, err := sys.MsgStat(id)
			if err != nil {
				t.Fatal(err)
			}
			q := &image.SysVMsgQueue{Key: ds.Perm.Key, ID: id, Mode: ds.Perm.Mode & 0o777, UID: ds.Perm.Uid, GID: ds.Perm.Gid,
				QBytes: ds.QBytes, LSPID: sys.PID(ds.LSPID), LRPID: sys.PID(ds.LRPID), STime: ds.STime, RTime: ds.RTime, CTime: ds.CTime,
				Messages: []image.SysVMsg{{Type: 1, Text: []byte("one")}, {Type: 2}}}
			tt.change(t, id)
			if ds, err = sys.MsgStat(id); err != nil {
				t.Fatal(err)
			}
			err = sameQueue(q, ds)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("sameQueue: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("sameQueue: %v, want %q", err, tt.want)
			}
		})
	}
}

// send sends a message of type typ from the test process.
func send(t *testing.T, id int, typ int64, text string) {
	t.Helper()
	if err := sys.MsgSend(id, typ, []byte(text), unix.IPC_NOWAIT); err != nil {
		t.Fatal(err)
	}
}
