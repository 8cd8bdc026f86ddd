package health

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appendMessage appends msg as JSON, byte for byte what encoding/json
// writes for it (struct fields in order, map keys sorted, HTML-safe
// escaping), except that nil maps are written {} and never null (the
// tests' encoding/json reference, export_test.go, does the same), without
// reflection: the heartbeat encodes thousands of members every interval. sc is scratch space reused between calls.
func appendMessage(b []byte, msg Message, sc *jsonScratch) []byte {
	b = appendHead(b, msg, sc)
	sc.pools = len(b)
	return appendPools(b, msg, sc)
}

// appendHead writes msg up to its pools: id, seq and listeners.
func appendHead(b []byte, msg Message, sc *jsonScratch) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, msg.ID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, msg.Seq, 10)
	b = append(b, `,"listeners":{`...)
	sc.keys = sortedKeys(sc.keys[:0], msg.Listeners)
	for i, k := range sc.keys {
		if i > 0 {
			b = append(b, ',')
		}
		l := msg.Listeners[k]
		b = appendJSONString(b, k)
		b = append(b, `:{"status":`...)
		b = appendJSONString(b, l.Status)
		b = append(b, `,"stats":{"tx":`...)
		b = strconv.AppendInt(b, l.Stats.TX, 10)
		b = append(b, `,"rx":`...)
		b = strconv.AppendInt(b, l.Stats.RX, 10)
		b = append(b, `,"conns":`...)
		b = strconv.AppendInt(b, l.Stats.Conns, 10)
		b = append(b, `,"totconns":`...)
		b = strconv.AppendInt(b, l.Stats.TotConns, 10)
		b = append(b, `,"ereq":`...)
		b = strconv.AppendInt(b, l.Stats.Ereq, 10)
		b = append(b, "}}"...)
	}
	return b
}

// appendPools writes the rest of msg: the pools and ver.
func appendPools(b []byte, msg Message, sc *jsonScratch) []byte {
	b = append(b, `},"pools":{`...)
	sc.keys = sortedKeys(sc.keys[:0], msg.Pools)
	for i, k := range sc.keys {
		if i > 0 {
			b = append(b, ',')
		}
		p := msg.Pools[k]
		b = appendJSONString(b, k)
		b = append(b, `:{"status":`...)
		b = appendJSONString(b, p.Status)
		b = append(b, `,"members":{`...)
		// A pool's members rarely change between heartbeats: the last
		// sorted order is used again while it names exactly the same
		// members (same number, each present), and sorting thousands of
		// ids every interval is avoided.
		start := len(b)
		order, ok := sc.orders[k]
		if ok && len(order) == len(p.Members) {
			b, ok = appendMembers(b, order, p.Members)
		} else {
			ok = false
		}
		if !ok {
			order = sortedKeys(make([]string, 0, len(p.Members)), p.Members)
			b, _ = appendMembers(b[:start], order, p.Members)
		}
		if sc.next == nil {
			sc.next = map[string][]string{}
		}
		sc.next[k] = order
		b = append(b, "}}"...)
	}
	// Orders of pools no longer reported are dropped.
	sc.orders, sc.next = sc.next, sc.orders
	clear(sc.next)
	b = append(b, `},"ver":`...)
	b = strconv.AppendInt(b, int64(msg.Ver), 10)
	b = append(b, '}')
	return b
}

// jsonScratch holds the sorted keys of one message being written, and
// each pool's sorted member ids from the last message.
type jsonScratch struct {
	keys         []string
	orders, next map[string][]string
	// pools is where the last message's pools part starts (the `}` that
	// closes the listeners), for Encoder.
	pools int
}

// appendMembers writes the members named by order; false when one of
// them is not in members.
func appendMembers(b []byte, order []string, members map[string]string) ([]byte, bool) {
	for j, m := range order {
		status, ok := members[m]
		if !ok {
			return b, false
		}
		if j > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m)
		b = append(b, ':')
		b = appendJSONString(b, status)
	}
	return b, true
}

func sortedKeys[V any](dst []string, m map[string]V) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}

const hexDigits = "0123456789abcdef"

// jsonPlain marks the bytes written as they are: printable ASCII other
// than the quote, the backslash and the HTML characters <, > and &.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

// appendJSONString writes s as encoding/json does: <, > and & as \u00XX,
// short escapes for \b \f \n \r \t, other control characters as \u00XX,
// invalid UTF-8 as \ufffd, and U+2028/U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
