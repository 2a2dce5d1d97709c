package parity

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
)

// TestRingOverNetwork runs encode and recovery with one goroutine per node
// over real streams: net.Pipe and loopback TCP, with the handshake on, as
// a coordinator would across agents.
func TestRingOverNetwork(t *testing.T) {
	sizes := []int64{300000, 123457, 0, 250000}
	const bs = 16384
	l, err := NewLayout(bs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	_, imgs := makeNodes(t, sizes, 11)
	n := l.N()

	for _, kind := range []string{"netpipe", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			// links[i]: node i (client end) → node i+1 (server end).
			links := func(skip int) (ins, outs []net.Conn) {
				ins, outs = make([]net.Conn, n), make([]net.Conn, n)
				for i := range n {
					if i == skip {
						continue
					}
					var a, b net.Conn
					if kind == "netpipe" {
						a, b = net.Pipe()
					} else {
						ln, err := net.Listen("tcp", "127.0.0.1:0")
						if err != nil {
							t.Skip("no loopback TCP:", err)
						}
						accepted := make(chan net.Conn, 1)
						go func() { c, _ := ln.Accept(); accepted <- c }()
						if a, err = net.Dial("tcp", ln.Addr().String()); err != nil {
							t.Fatal(err)
						}
						b = <-accepted
						ln.Close()
					}
					outs[i], ins[(i+1)%n] = a, b
					t.Cleanup(func() { a.Close(); b.Close() })
				}
				return ins, outs
			}
			ins, outs := links(-1)
			pars := make([]bytes.Buffer, n)
			stats := make([]NodeStats, n)
			errs := make(chan error, n)
			for i := range n {
				go func() {
					var err error
					stats[i], err = RunNode(context.Background(), NodeConfig{Layout: l, Index: i, Handshake: true},
						ins[i], outs[i], bytes.NewReader(imgs[i]), &pars[i])
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			ref := referenceParity(l, imgs)
			hdrs := make([]*Header, n)
			hashes := make([][32]byte, n)
			for i := range n {
				if !bytes.Equal(pars[i].Bytes(), ref[i]) {
					t.Fatalf("node %d parity differs from reference", i)
				}
				hashes[i] = stats[i].ImageDigest
			}
			for i := range n {
				hdrs[i] = &Header{Version: formatVersion, N: n, Index: i, BlockSize: bs, Sizes: sizes, Hashes: hashes,
					DataCRC: stats[i].DataCRC, ParityCRC: stats[i].ParityCRC, ParityBytes: l.ParityBytes(i)}
			}

			for x := range n {
				ins, outs := links(x)
				var img, par bytes.Buffer
				var rstats NodeStats
				for i := range n {
					go func() {
						cfg := RecoverConfig{NodeConfig: NodeConfig{Layout: l, Index: i, Handshake: true}, Lost: x}
						var err error
						if i == x {
							rstats, err = RunReplacement(context.Background(), cfg, ins[i], &img, &par)
						} else {
							var in io.Reader
							if ins[i] != nil {
								in = ins[i]
							}
							share := &Share{Header: hdrs[i], payload: bytes.NewReader(pars[i].Bytes())}
							_, err = RunSurvivor(context.Background(), cfg, in, outs[i], bytes.NewReader(imgs[i]), share)
						}
						errs <- err
					}()
				}
				for range n {
					if err := <-errs; err != nil {
						t.Fatalf("recover %d: %v", x, err)
					}
				}
				if !bytes.Equal(img.Bytes(), imgs[x]) || !bytes.Equal(par.Bytes(), pars[x].Bytes()) || rstats.ImageDigest != hashes[x] {
					t.Fatalf("recover %d over %s: rebuilt image/parity differ", x, kind)
				}
			}
		})
	}
}
