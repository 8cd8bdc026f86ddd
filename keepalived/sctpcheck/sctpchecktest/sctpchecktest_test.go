package sctpchecktest

import (
	"testing"

	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

// ChecksumOK accepts the packets the probe builds and tells them from one
// with a changed byte or a short one.
func TestChecksumOK(t *testing.T) {
	p := sctpcheck.InitPacket(4000, 5000, 7, 1)
	if !ChecksumOK(p) {
		t.Error("ChecksumOK refuses a packet the probe built")
	}
	p[len(p)-1] ^= 1
	if ChecksumOK(p) || ChecksumOK(p[:4]) {
		t.Error("ChecksumOK accepts a changed or short packet")
	}
}
