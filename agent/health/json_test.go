package health

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// appendMessage writes exactly what encoding/json writes, for messages
// with every kind of string the controller or HAProxy could hand over:
// HTML characters, controls, quotes, non-ASCII, invalid UTF-8, U+2028.
func TestAppendMessageMatchesEncodingJSON(t *testing.T) {
	nasty := []string{"", "a", "UP", "no check", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\there", "nl\nx", "cr\r",
		"\b\f\x00\x01\x1f\x7f", "é ü 中文", "\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80", "emoji 😀", "p:l"}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func() string {
		if rng.IntN(3) == 0 {
			return uuid(rng.IntN(1 << 20))
		}
		return nasty[rng.IntN(len(nasty))] + nasty[rng.IntN(len(nasty))]
	}
	num := func() int64 {
		return []int64{0, 1, 42, math.MaxInt64, rng.Int64()}[rng.IntN(5)]
	}
	var sc jsonScratch
	for round := range 400 {
		msg := Message{ID: pick(), Seq: rng.Uint64(), Ver: Version}
		if round%5 != 0 {
			msg.Listeners = map[string]Listener{}
			msg.Pools = map[string]Pool{}
		}
		for range rng.IntN(4) {
			if msg.Listeners == nil {
				break
			}
			msg.Listeners[pick()] = Listener{Status: pick(), Stats: Stats{TX: num(), RX: num(), Conns: num(), TotConns: num(), Ereq: num()}}
		}
		for range rng.IntN(4) {
			if msg.Pools == nil {
				break
			}
			p := Pool{Status: pick()}
			if rng.IntN(4) != 0 {
				p.Members = map[string]string{}
				for range rng.IntN(30) {
					p.Members[pick()] = pick()
				}
			}
			msg.Pools[pick()] = p
		}
		want, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		got := appendMessage([]byte("prefix"), msg, &sc)
		if !bytes.Equal(got[6:], want) || string(got[:6]) != "prefix" {
			t.Fatalf("round %d:\n got %s\nwant %s", round, got[6:], want)
		}
	}
}
