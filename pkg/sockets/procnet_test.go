package sockets

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/procnet holds tables as a test machine showed them: icmp with
// a ping socket connected to 127.0.0.2 (inode 10594451) and one only
// bound (10594452), raw6 with an ICMPv6 raw socket connected to ::1
// (10594453).
func TestParseNetPeer(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata/procnet", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	icmp, raw6 := read("icmp"), read("raw6")
	tests := []struct {
		name, file, text string
		ino              uint64
		want             netip.Addr
		ok               bool
		wantErr          string
	}{
		{"ping connected", "icmp", icmp, 10594451, netip.MustParseAddr("127.0.0.2"), true, ""},
		{"ping bound", "icmp", icmp, 10594452, netip.Addr{}, false, ""},
		{"raw6 connected", "raw6", raw6, 10594453, netip.MustParseAddr("::1"), true, ""},
		{"not there", "icmp", icmp, 1, netip.Addr{}, false, "socket 1 not in icmp"},
		{"header only", "raw", strings.SplitAfter(icmp, "\n")[0], 10594451, netip.Addr{}, false, "not in raw"},
		{"bad address", "icmp", strings.Replace(icmp, "0200007F:0000", "02zz007F:0000", 1), 10594451, netip.Addr{}, false, "address"},
		{"short address", "icmp", strings.Replace(icmp, "0200007F:0000", "0200:0000", 1), 10594451, netip.Addr{}, false, "address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := parseNetPeer([]byte(tt.text), tt.file, tt.ino)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || ok != tt.ok || got != tt.want {
				t.Errorf("got %v %v %v, want %v %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParseNetPeer(f *testing.F) {
	for _, n := range []string{"icmp", "raw6"} {
		b, err := os.ReadFile(filepath.Join("testdata/procnet", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(10594451))
		f.Add(b, uint64(10594453))
	}
	f.Fuzz(func(t *testing.T, b []byte, ino uint64) {
		a, ok, err := parseNetPeer(b, "icmp", ino)
		if err != nil {
			return
		}
		if ok != a.IsValid() {
			t.Fatalf("connected %v with address %v", ok, a)
		}
		if ok && !bytes.Contains(b, []byte(" 01 ")) {
			t.Fatalf("connected without an established line")
		}
	})
}
