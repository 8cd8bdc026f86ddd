package cloud

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
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

// AgentJournal is the command that prints the agent's journal records of
// the current boot as AgentRequests reads them: one JSON object a line.
// With use_syslog = True (Octavia's agent config) the records reach the
// journal through syslog, which carries no time of the agent's own, so
// the journal's receive time is the only one every record has.
const AgentJournal = "journalctl -b -u amphora-agent.service -o json --output-fields=MESSAGE --no-pager"

// The agent's request record (debug = True logs one per request), in
// whichever form it reached the journal (syslog or stderr): its fields
// end the message.
var requestRecord = regexp.MustCompile(`\srequest\s+(\{.*\})\s*$`)

// AgentRequests reads the output of AgentJournal.
func AgentRequests(journal string) AgentShare {
	var a AgentShare
	for _, line := range strings.Split(journal, "\n") {
		var rec struct {
			Realtime string `json:"__REALTIME_TIMESTAMP"`
			Message  any    `json:"MESSAGE"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		msg, _ := rec.Message.(string) // journald gives bytes as an array: not the agent's
		m := requestRecord.FindStringSubmatch(msg)
		usec, err := strconv.ParseInt(rec.Realtime, 10, 64)
		if m == nil || err != nil {
			continue
		}
		at := time.UnixMicro(usec)
		var fields struct {
			Took string `json:"took"`
		}
		json.Unmarshal([]byte(m[1]), &fields)
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
