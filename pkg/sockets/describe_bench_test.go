package sockets

import (
	"net"
	"testing"
)

// BenchmarkDescribe describes an established loopback connection (the
// per-socket work of a dump of many connections), reading the options of
// a new socket each time or once (Defaults).
func BenchmarkDescribe(b *testing.B) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	f, err := sc.(*net.TCPConn).File()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	for _, c := range []struct {
		name string
		defs *Defaults
	}{{"alone", nil}, {"defaults", &Defaults{}}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if _, err := DescribeWith(fd, c.defs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
