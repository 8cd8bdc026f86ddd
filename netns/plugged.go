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

// addPlugged appends "<mac> <name>" unless the MAC is listed already, and
// returns how to put back the previous content.
func (n *Network) addPlugged(mac net.HardwareAddr, name string) (func(), error) {
	path := n.cfg.PluggedFile
	old, readErr := os.ReadFile(path)
	if readErr != nil && !errors.Is(readErr, fs.ErrNotExist) {
		return nil, readErr
	}
	list, err := ReadPlugged(path)
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		if bytes.Equal(p.MAC, mac) {
			return func() {}, nil
		}
	}
	data := old
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	data = append(data, []byte(mac.String()+" "+name+"\n")...)
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
