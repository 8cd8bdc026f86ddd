// Package sctpchecktest checks SCTP packets as a receiving SCTP stack
// would, for the tests of the probe and for the tier tests' SCTP peer:
// the probe itself only sends packets and reads chunk types.
package sctpchecktest

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ChecksumOK reports whether a packet (common header on) carries its
// CRC32c (stored little-endian, RFC 9260 Appendix A).
func ChecksumOK(p []byte) bool {
	if len(p) < sctpcheck.HeaderLen {
		return false
	}
	c := append([]byte(nil), p...)
	binary.LittleEndian.PutUint32(c[8:], 0)
	return binary.LittleEndian.Uint32(p[8:]) == crc32.Checksum(c, castagnoli)
}
