package netns

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// Plugged is one line of the plugged-interfaces file.
type Plugged struct {
	MAC  net.HardwareAddr
	Name string
}

// ReadPlugged reads the plugged-interfaces file ("<mac> <name>" lines); a
// missing file lists nothing. Malformed lines are skipped.
func ReadPlugged(path string) ([]Plugged, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Plugged
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		mac, err := normMAC(f[0])
		if err != nil {
			continue
		}
		out = append(out, Plugged{MAC: mac, Name: f[1]})
	}
	return out, nil
}

// addPlugged records "<mac> <name>": the line replaces every line with
// that MAC or that name, and returns how to put back the previous
// content. A new port only gets a name no link in the namespace holds, so
// an older line with the name is a NIC detached since (Nova removes it
// without a call to the agent); upstream appends only, so its file grows
// by a line with every member port ever plugged, and the restore after a
// reboot waits for each of those NICs, which never come back.
func (n *Network) addPlugged(mac net.HardwareAddr, name string) (func(), error) {
	path := n.cfg.PluggedFile
	old, readErr := os.ReadFile(path)
	if readErr != nil && !errors.Is(readErr, fs.ErrNotExist) {
		return nil, readErr
	}
	line := mac.String() + " " + name
	var data []byte
	for _, l := range strings.SplitAfter(string(old), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			if m, err := normMAC(f[0]); err == nil && (bytes.Equal(m, mac) || f[1] == name) {
				continue
			}
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		data = append(data, strings.TrimSuffix(l, "\n")+"\n"...)
	}
	data = append(data, line+"\n"...)
	if bytes.Equal(data, old) {
		return func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return func() {
		if err := putBack(path, old, readErr); err != nil {
			n.log.Error("rollback: cannot restore the plugged interfaces file", zap.Error(err))
		}
	}, nil
}
