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

// A pool's member order is reused from the previous message only while
// it names exactly the same members: a member swapped for another (same
// count), added, removed or renamed still gives encoding/json's output.
func TestAppendMessageMembersChangeBetweenMessages(t *testing.T) {
	var sc jsonScratch
	steps := []map[string]string{
		{"m1": "UP", "m2": "DOWN", "m3": "UP"},
		{"m1": "UP", "m2": "DOWN", "m3": "UP"},
		{"m1": "UP", "m0": "DOWN", "m3": "UP"},
		{"m1": "UP", "m0": "DOWN"},
		{"m1": "UP", "m0": "DOWN", "m3": "UP", "a": "no check"},
		{},
		nil,
		{"z": "UP"},
	}
	for i, members := range steps {
		msg := Message{ID: "a", Ver: Version, Listeners: map[string]Listener{},
			Pools: map[string]Pool{"p:l": {Status: "UP", Members: members}}}
		if i%2 == 1 {
			msg.Pools["other:l"] = Pool{Status: "UP", Members: map[string]string{"x": "UP"}}
		}
		want, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMessage(nil, msg, &sc); !bytes.Equal(got, want) {
			t.Fatalf("step %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
