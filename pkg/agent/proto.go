package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/ckpt/ckpt/pkg/parity"
)

// Operations a Request can ask for.
const (
	OpHello         = "hello"          // who are you
	OpExec          = "exec"           // start a program on the node
	OpKill          = "kill"           // SIGKILL processes and wait until they are gone
	OpDump          = "dump"           // ckpt dump, with the group barriers
	OpRestore       = "restore"        // ckpt-redo, from a directory or listening
	OpRemove        = "remove"         // delete a stored image directory
	OpImageSize     = "image-size"     // size of a stored image
	OpParityEncode  = "parity-encode"  // one node of an encode ring
	OpParitySurvive = "parity-survive" // one survivor of a recovery ring
	OpParityReplace = "parity-replace" // the node that rebuilds the lost one

	// Follow-up words sent during an operation.
	OpContinue = "continue" // after "frozen"
	OpCommit   = "commit"   // after "prepared"
	OpRelease  = "release"  // after "built" (restore from a directory)
	OpAbort    = "abort"    // at any barrier
	OpConnect  = "connect"  // parity: connect to the right-hand neighbour
	OpFinish   = "finish"   // parity: write the share header and commit
)

// Events an agent reports.
const (
	EvOK        = "ok"        // the operation is done (last event)
	EvError     = "error"     // the operation failed (last event)
	EvFrozen    = "frozen"    // dump: every process frozen, lock in place
	EvPrepared  = "prepared"  // dump: image complete (receiver holds its copy)
	EvListening = "listening" // restore, parity: Addr is where to connect
	EvBuilt     = "built"     // restore: processes built and held stopped
	EvReleased  = "released"  // restore: processes run
	EvStats     = "stats"     // parity: the node's ring is done
	EvProgress  = "progress"  // dump: Done of Total bytes of memory written
)

// Request is one line from the coordinator.
type Request struct {
	Op string `json:"op"`

	// exec
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Stdout string   `json:"stdout,omitempty"` // file (appended to; /dev/null if empty)
	Cwd    string   `json:"cwd,omitempty"`

	// kill, dump
	PIDs []int `json:"pids,omitempty"`
	PID  int   `json:"pid,omitempty"`

	// Image is an image directory relative to the agent's root.
	Image        string `json:"image,omitempty"`
	To           string `json:"to,omitempty"`     // dump: stream to HOST:PORT
	Listen       bool   `json:"listen,omitempty"` // restore: receive a transfer
	Keep         bool   `json:"keep,omitempty"`   // restore --listen: store a copy in Image
	LeaveRunning bool   `json:"leave_running,omitempty"`
	Rules        string `json:"rules,omitempty"` // restore: rewrite rules text

	// parity
	Index     int        `json:"index,omitempty"`
	Lost      int        `json:"lost,omitempty"`
	BlockSize int        `json:"block_size,omitempty"`
	Sizes     []int64    `json:"sizes,omitempty"`
	Header    []byte     `json:"header,omitempty"` // a survivor's share header
	Right     string     `json:"right,omitempty"`  // connect: HOST:PORT or "" for none
	EncodeID  [16]byte   `json:"encode_id,omitzero"`
	Hashes    [][32]byte `json:"hashes,omitempty"`
}

// Event is one line from the agent.
type Event struct {
	Event  string            `json:"event"`
	Error  string            `json:"error,omitempty"`
	Node   string            `json:"node,omitempty"`    // hello
	DataIP string            `json:"data_ip,omitempty"` // hello: address for data links
	PID    int               `json:"pid,omitempty"`     // exec
	Addr   string            `json:"addr,omitempty"`    // listening
	Size   int64             `json:"size,omitempty"`    // image-size
	Index  int               `json:"index,omitempty"`   // parity-survive
	Header []byte            `json:"header,omitempty"`  // parity-survive
	Result json.RawMessage   `json:"result,omitempty"`  // dump, restore: the tool's --json output
	Stats  *parity.NodeStats `json:"stats,omitempty"`
	Done   int64             `json:"done,omitempty"`  // progress
	Total  int64             `json:"total,omitempty"` // progress
	// Timeout marks an EvError the coordinator made up because the agent
	// did not answer in time; never sent by an agent.
	Timeout bool `json:"-"`
}

// Conn is one control connection, from either side.
type Conn struct {
	c  net.Conn
	r  *bufio.Reader
	en *json.Encoder
}

// NewConn wraps a connected socket.
func NewConn(c net.Conn) *Conn {
	return &Conn{c: c, r: bufio.NewReader(c), en: json.NewEncoder(c)}
}

// Send writes one message.
func (c *Conn) Send(v any) error { return c.en.Encode(v) }

// Recv reads one message into v.
func (c *Conn) Recv(v any) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		if err == io.EOF {
			return fmt.Errorf("connection closed: %w", io.ErrUnexpectedEOF)
		}
		return err
	}
	return json.Unmarshal(line, v)
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Listen listens on addr: "unix:PATH" or HOST:PORT.
func Listen(addr string) (net.Listener, error) {
	if path, ok := cutUnix(addr); ok {
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// Dial connects to an agent at addr ("unix:PATH" or HOST:PORT).
func Dial(addr string) (*Conn, error) {
	network, a := "tcp", addr
	if path, ok := cutUnix(addr); ok {
		network, a = "unix", path
	}
	c, err := net.Dial(network, a)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", addr, err)
	}
	return NewConn(c), nil
}

func cutUnix(addr string) (string, bool) {
	if len(addr) > 5 && addr[:5] == "unix:" {
		return addr[5:], true
	}
	return "", false
}
