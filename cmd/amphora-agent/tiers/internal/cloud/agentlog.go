package cloud

import (
	"encoding/json"
	"regexp"
	"time"
)

// AgentShare is the agent's part of a flow, from its journal: how many
// API requests it answered, when the first arrived (its log time less its
// duration) and when the last was answered.
type AgentShare struct {
	Requests    int
	First, Last time.Time
}

// Span is the time from the first request to the last answer.
func (a AgentShare) Span() time.Duration { return a.Last.Sub(a.First) }

// The agent's request line on stderr (the journal holds each record a
// second time, through syslog, without the time; only this form counts).
var requestLine = regexp.MustCompile(`(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)\s+DEBUG\s+api\s+\S+\s+request\s+(\{.*\})`)

// AgentRequests reads the agent's journal text (debug = True logs one
// line per request).
func AgentRequests(journal string) AgentShare {
	var a AgentShare
	for _, m := range requestLine.FindAllStringSubmatch(journal, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		var fields struct {
			Took string `json:"took"`
		}
		json.Unmarshal([]byte(m[2]), &fields)
		took, _ := time.ParseDuration(fields.Took)
		if start := at.Add(-took); a.Requests == 0 || start.Before(a.First) {
			a.First = start
		}
		if at.After(a.Last) {
			a.Last = at
		}
		a.Requests++
	}
	return a
}
