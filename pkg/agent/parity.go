package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ckpt/ckpt/pkg/parity"
)

// linkTimeout bounds how long a ring node waits for its neighbours to
// connect.
const linkTimeout = 30 * time.Second

func (a *Agent) imageSize(req *Request) (Event, error) {
	dir, err := a.imageDir(req.Image)
	if err != nil {
		return Event{}, err
	}
	size, err := parity.ImageSize(dir, parity.Options{})
	return Event{Size: size}, err
}

// ringNode is what an encode, survivor or replacement node does once its
// links are up.
type ringNode interface {
	Run(ctx context.Context, left io.Reader, right io.Writer) (parity.NodeStats, error)
}

// ring listens for the left-hand neighbour (if needLeft), reports where
// (EvListening, with the node's index and share header for a survivor),
// waits for the coordinator's connect (with the right-hand neighbour's
// address, or none), runs the node over the two TCP links, reports EvStats
// and returns the coordinator's "finish". Any other word from the
// coordinator, or its connection closing, aborts the run.
func (a *Agent) ring(ctx context.Context, c *Conn, node ringNode, index int, header []byte, needLeft bool) (*Request, error) {
	if a.cfg.DataIP == "" {
		return nil, errors.New("parity: this agent has no data address (--data-ip)")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(a.cfg.DataIP, "0"))
	if err != nil {
		return nil, fmt.Errorf("parity: listen: %w", err)
	}
	defer l.Close()
	addr := ""
	if needLeft {
		addr = l.Addr().String()
	}
	if err := c.Send(Event{Event: EvListening, Addr: addr, Index: index, Header: header}); err != nil {
		return nil, err
	}
	var dec Request
	if err := c.Recv(&dec); err != nil {
		return nil, fmt.Errorf("parity: waiting for the coordinator: %w", err)
	}
	if dec.Op != OpConnect {
		return nil, fmt.Errorf("parity: told %q", dec.Op)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan *Request, 1)
	go func() {
		var r Request
		if err := c.Recv(&r); err != nil {
			next <- nil
			cancel()
			return
		}
		next <- &r
		if r.Op != OpFinish {
			cancel()
		}
	}()

	type accepted struct {
		c   net.Conn
		err error
	}
	leftCh := make(chan accepted, 1)
	if needLeft {
		go func() {
			l.(*net.TCPListener).SetDeadline(time.Now().Add(linkTimeout))
			lc, err := l.Accept()
			leftCh <- accepted{lc, err}
		}()
	}
	var left io.Reader
	var right io.Writer
	if dec.Right != "" {
		var rc net.Conn
		deadline := time.Now().Add(linkTimeout)
		for {
			rc, err = net.DialTimeout("tcp", dec.Right, time.Second)
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return nil, fmt.Errorf("parity: connect to the right-hand neighbour %s: %w", dec.Right, err)
		}
		defer rc.Close()
		right = rc
	}
	if needLeft {
		acc := <-leftCh
		if acc.err != nil {
			return nil, fmt.Errorf("parity: the left-hand neighbour did not connect: %w", acc.err)
		}
		defer acc.c.Close()
		left = acc.c
	}
	st, err := node.Run(ctx, left, right)
	if err != nil {
		return nil, err
	}
	if err := c.Send(Event{Event: EvStats, Stats: &st}); err != nil {
		return nil, err
	}
	r := <-next
	if r == nil || r.Op != OpFinish {
		return nil, errors.New("parity: the coordinator did not say finish")
	}
	return r, nil
}

func (a *Agent) parityEncode(ctx context.Context, c *Conn, req *Request) (Event, error) {
	dir, err := a.imageDir(req.Image)
	if err != nil {
		return Event{}, err
	}
	l, err := parity.NewLayout(req.BlockSize, req.Sizes)
	if err != nil {
		return Event{}, err
	}
	node, err := parity.OpenEncode(dir, l, req.Index, parity.Options{})
	if err != nil {
		return Event{}, err
	}
	defer node.Close()
	fin, err := a.ring(ctx, c, node, req.Index, nil, true)
	if err != nil {
		return Event{}, err
	}
	return Event{}, node.Finish(fin.EncodeID, fin.Hashes)
}

func (a *Agent) parityRecover(ctx context.Context, c *Conn, req *Request) (Event, error) {
	dir, err := a.imageDir(req.Image)
	if err != nil {
		return Event{}, err
	}
	var node *parity.RecoverNode
	var index int
	var hdr []byte
	if req.Op == OpParitySurvive {
		node, err = parity.OpenSurvivor(dir, req.Lost, parity.Options{})
		if err != nil {
			return Event{}, err
		}
		index = node.Header().Index
		if hdr, err = node.Header().MarshalBinary(); err != nil {
			node.Close()
			return Event{}, err
		}
	} else {
		ref, err := parity.DecodeHeader(req.Header)
		if err != nil {
			return Event{}, fmt.Errorf("parity: reference header: %w", err)
		}
		if node, err = parity.OpenReplacement(dir, ref, req.Lost, parity.Options{}); err != nil {
			return Event{}, err
		}
		index = req.Lost
	}
	defer node.Close()
	needLeft := index != (req.Lost+1)%node.Header().N
	if _, err := a.ring(ctx, c, node, index, hdr, needLeft); err != nil {
		return Event{}, err
	}
	return Event{}, node.Finish()
}
