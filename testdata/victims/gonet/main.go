// gonet is a Go victim with live TCP connections made the Go way
// (non-blocking connect, the runtime's edge-triggered epoll): an HTTP
// server and a keep-alive HTTP client of it, and a line echo server with
// one client connection, all in one process.
//
//	gonet LOG
//
// Every 20 ms it sends a request on the kept-alive HTTP connection and a
// line on the echo connection, checks both answers, and writes
// "tick N http=LOCAL echo=LOCAL": the local addresses of the two client
// connections, which must never change (a connection lost and made
// again is a new one: the HTTP transport would redial silently, so gonet
// checks that every request after the first reuses it). Its listeners
// are MPTCP sockets when the kernel allows it (Go's default since 1.24):
// "start" names their SO_PROTOCOL, which every tick checks again, and
// the echo server's address (a test connects to it: the echo server
// closes a connection once its client shut its sending side). A wrong
// answer or a new connection writes
// "FAIL <what>" and exits 1. On SIGUSR2 it writes "bye N" and exits 0.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gonet LOG")
		os.Exit(2)
	}
	log, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(log, "FAIL "+format+"\n", args...)
		os.Exit(1)
	}

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		fmt.Fprintf(w, "%d", n*n+7)
	}))
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Hour}}
	echo, err := net.Dial("tcp", el.Addr().String())
	if err != nil {
		panic(err)
	}
	er := bufio.NewReader(echo)

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR2)
	proto := protocols(hl, el)
	fmt.Fprintf(log, "start pid=%d proto=%s echo=%s\n", os.Getpid(), proto, el.Addr())
	var httpLocal string
	tick := time.NewTicker(20 * time.Millisecond)
	for n := 1; ; n++ {
		select {
		case <-sig:
			fmt.Fprintf(log, "bye %d\n", n-1)
			os.Exit(0)
		case <-tick.C:
		}
		var local string
		reused := false
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			local, reused = i.Conn.LocalAddr().String(), i.Reused
		}}
		r, err := http.NewRequest("GET", fmt.Sprintf("http://%s/?n=%d", hl.Addr(), n), nil)
		if err != nil {
			fail("request %d: %v", n, err)
		}
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
		resp, err := client.Do(r)
		if err != nil {
			fail("GET %d: %v", n, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != strconv.Itoa(n*n+7) {
			fail("GET %d: %q, %v; want %d", n, body, err, n*n+7)
		}
		switch {
		case httpLocal == "":
			httpLocal = local
		case !reused || local != httpLocal:
			fail("GET %d went on a new connection from %s (reused %v), not the kept-alive one from %s", n, local, reused, httpLocal)
		}
		line := fmt.Sprintf("echo %d %s\n", n, strings.Repeat("x", n%50))
		if _, err := io.WriteString(echo, line); err != nil {
			fail("echo write %d: %v", n, err)
		}
		back, err := er.ReadString('\n')
		if err != nil || back != line {
			fail("echo %d: %q, %v; want %q", n, back, err, line)
		}
		if p := protocols(hl, el); p != proto {
			fail("tick %d: listeners' SO_PROTOCOL %s, was %s", n, p, proto)
		}
		fmt.Fprintf(log, "tick %d http=%s echo=%s\n", n, httpLocal, echo.LocalAddr())
	}
}

// protocols names the SO_PROTOCOL of the listeners ("262,262": MPTCP).
func protocols(ls ...net.Listener) string {
	var out []string
	for _, l := range ls {
		rc, err := l.(*net.TCPListener).SyscallConn()
		if err != nil {
			return err.Error()
		}
		p, serr := 0, error(nil)
		if err := rc.Control(func(fd uintptr) {
			p, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
		}); err != nil {
			return err.Error()
		}
		if serr != nil {
			return serr.Error()
		}
		out = append(out, strconv.Itoa(p))
	}
	return strings.Join(out, ",")
}
