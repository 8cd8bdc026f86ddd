package vm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"
)

// jsonConn speaks the line-delimited JSON of QMP and the guest agent.
type jsonConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func dialJSON(path string, timeout time.Duration) (*jsonConn, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return &jsonConn{conn: c, r: bufio.NewReaderSize(c, 1<<20)}, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *jsonConn) send(command string, args any) error {
	m := map[string]any{"execute": command}
	if args != nil {
		m["arguments"] = args
	}
	data, _ := json.Marshal(m)
	_, err := c.conn.Write(append(data, '\n'))
	return err
}

func (c *jsonConn) readLine() ([]byte, error) { return c.r.ReadBytes('\n') }

// call sends one command and returns its "return", skipping QMP events.
func (c *jsonConn) call(command string, args any) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.send(command, args); err != nil {
		return nil, err
	}
	for {
		line, err := c.readLine()
		if err != nil {
			return nil, err
		}
		var r struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s: %w: %q", command, err, line)
		}
		switch {
		case r.Event != "":
			continue
		case r.Error != nil:
			return nil, fmt.Errorf("%s: %s", command, r.Error.Desc)
		default:
			return r.Return, nil
		}
	}
}
