// gocounter is a multi-threaded Go victim: many goroutines, timers,
// channels and a mutex-protected map, on several OS threads (Go also uses
// signals for preemption, futexes, epoll and eventfd internally).
//
//	gocounter LOG
//
// It writes "tick N" lines (N = 1, 2, 3, ...) every 20 ms. On SIGUSR1 it
// verifies its own state — every worker's count matches what the collector
// received through the channel, and a 16 MiB buffer still has its checksum
// — and writes "check ok N" or "check FAIL <what>". On SIGUSR2 it writes
// "bye N" and exits 0.
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

const workers = 16

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gocounter LOG")
		os.Exit(2)
	}
	log, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	runtime.GOMAXPROCS(4)
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	want := sha256.Sum256(buf)

	var mu sync.Mutex
	sent := map[int]int{} // worker -> messages sent
	ch := make(chan int, 64)
	received := make([]int, workers)
	var recvMu sync.Mutex
	go func() {
		for w := range ch {
			recvMu.Lock()
			received[w]++
			recvMu.Unlock()
		}
	}()
	for w := 0; w < workers; w++ {
		go func(w int) {
			t := time.NewTicker(time.Duration(1+w%5) * time.Millisecond)
			for range t.C {
				mu.Lock()
				sent[w]++
				mu.Unlock()
				ch <- w
			}
		}(w)
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	fmt.Fprintf(log, "start pid=%d\n", os.Getpid())
	tick := time.NewTicker(20 * time.Millisecond)
	for n := 1; ; {
		select {
		case <-tick.C:
			fmt.Fprintf(log, "tick %d threads=%d\n", n, threads())
			n++
		case s := <-sig:
			if s == syscall.SIGUSR2 {
				fmt.Fprintf(log, "bye %d\n", n-1)
				os.Exit(0)
			}
			// Stop the world of workers for a consistent view: lock both,
			// drain the channel.
			mu.Lock()
			for len(ch) > 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
			recvMu.Lock()
			bad := ""
			for w := 0; w < workers; w++ {
				if sent[w] != received[w] {
					bad += fmt.Sprintf(" worker%d sent=%d received=%d", w, sent[w], received[w])
				}
			}
			recvMu.Unlock()
			mu.Unlock()
			if sha256.Sum256(buf) != want {
				bad += " buffer checksum"
			}
			if bad != "" {
				fmt.Fprintf(log, "check FAIL%s\n", bad)
			} else {
				fmt.Fprintf(log, "check ok %d\n", n-1)
			}
		}
	}
}

func threads() int {
	ents, _ := os.ReadDir("/proc/self/task")
	return len(ents)
}
