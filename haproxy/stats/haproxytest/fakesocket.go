package haproxytest

import (
	"bufio"
	"net"
	"sync"
	"testing"
)

// FakeSocket serves a UNIX socket the way HAProxy's stats socket does:
// read one command line, answer, close. It records the commands.
type FakeSocket struct {
	Path string
	mu   sync.Mutex
	cmds []string
}

// ServeFake listens on path and answers each command with answer's text,
// or keeps the connection open without answering until the test ends when
// answer says hang.
func ServeFake(t testing.TB, path string, answer func(cmd string) (text string, hang bool)) *FakeSocket {
	return ServeFakeConn(t, path, func(cmd string, conn net.Conn, release <-chan struct{}) {
		out, hang := answer(cmd)
		if hang {
			<-release
			return
		}
		conn.Write([]byte(out))
	})
}

// ServeFakeConn is ServeFake with the answer written by serve, which may
// wait for release (the end of the test); the connection is closed when
// serve returns.
func ServeFakeConn(t testing.TB, path string, serve func(cmd string, conn net.Conn, release <-chan struct{})) *FakeSocket {
	t.Helper()
	f := &FakeSocket{Path: path}
	release := make(chan struct{})
	ln, err := net.Listen("unix", f.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, err := bufio.NewReader(conn).ReadString('\n')
				if err != nil {
					return
				}
				f.mu.Lock()
				f.cmds = append(f.cmds, line)
				f.mu.Unlock()
				serve(line[:len(line)-1], conn, release)
			}()
		}
	}()
	return f
}

// Commands returns the command lines received so far, newline included.
func (f *FakeSocket) Commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
}
