package bpftask

import "testing"

// BenchmarkOpenReaders opens the four readers a dump may need, each
// decoding the kernel's BTF (separate) or all with one Kernel (shared,
// as a dump does).
func BenchmarkOpenReaders(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "separate", true: "shared"}[shared]
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var k *Kernel
				if shared {
					k = NewKernel()
				}
				r, err := Open(k)
				if err != nil {
					b.Skip(err)
				}
				r.Close()
				t, err := OpenTCP(k)
				if err != nil {
					b.Fatal(err)
				}
				t.Close()
				u, err := OpenUnix(k)
				if err != nil {
					b.Fatal(err)
				}
				u.Close()
				s, err := OpenSock(k)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}
