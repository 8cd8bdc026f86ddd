package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// Framework-shaped descriptions, word for word as the upstream agent's web
// framework produces them.
const (
	descNotFound         = "The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again."
	descMethodNotAllowed = "The method is not allowed for the requested URL."
	descInternal         = "The server encountered an internal error and was unable to complete your request. Either the server is overloaded or there is an error in the application."
)

// message is the handler-shaped body. Details is a pointer so it is left
// out when the upstream body has none.
type message struct {
	Message string  `json:"message"`
	Details *string `json:"details,omitempty"`
}

// frameworkError is the framework-shaped body.
type frameworkError struct {
	Error    string `json:"error"`
	HTTPCode int    `json:"http_code"`
}

func ok() message { return message{Message: "OK"} }

func okDetails(details string) message { return message{Message: "OK", Details: &details} }

// writeJSON writes v compactly, without HTML escaping and without a
// trailing newline, as upstream's responses look.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		fmt.Fprintf(&buf, `{"error": %q, "http_code": 500}`, "500 Internal Server Error: "+descInternal)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

func writeFramework(w http.ResponseWriter, status int, description string) {
	writeJSON(w, status, frameworkError{
		Error:    fmt.Sprintf("%d %s: %s", status, http.StatusText(status), description),
		HTTPCode: status,
	})
}

var kindStatus = map[fault.Kind]int{
	fault.KindInvalid:  http.StatusBadRequest,
	fault.KindNotFound: http.StatusNotFound,
	fault.KindConflict: http.StatusConflict,
	fault.KindInternal: http.StatusInternalServerError,
}

// writeError is the one place an error becomes a response and a log line.
func writeError(w http.ResponseWriter, r *http.Request, log *zap.Logger, err error) {
	fe, isFault := fault.As(err)
	if !isFault {
		fe = &fault.Error{Kind: fault.KindInternal, Framework: true, Cause: err}
	}
	status := kindStatus[fe.Kind]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	fields := []zap.Field{zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Int("status", status), zap.Error(err)}
	if status >= 500 {
		log.Error("request failed", fields...)
	} else {
		log.Info("request refused", fields...)
	}
	switch {
	case diskFull(err):
		writeJSON(w, status, diskFullBody(fe, err))
	case fe.Framework && status == http.StatusInternalServerError:
		writeFramework(w, status, descInternal)
	case fe.Framework:
		writeFramework(w, status, fe.Message)
	default:
		body := message{Message: fe.Message}
		if fe.HasDetails {
			body.Details = &fe.Details
		}
		writeJSON(w, status, body)
	}
}

// Descriptions of the framework answers for requests that cannot be read,
// as upstream's framework words them.
var unreadableDesc = map[int]string{
	http.StatusBadRequest:                  "The browser (or proxy) sent a request that this server could not understand.",
	http.StatusRequestHeaderFieldsTooLarge: "One or more header fields exceeds the maximum size.",
	http.StatusNotImplemented:              "The server does not support the action requested by the browser.",
	http.StatusExpectationFailed:           "The server could not meet the requirements of the Expect header",
	http.StatusHTTPVersionNotSupported:     "The server does not support the HTTP protocol version used in the request.",
}

// UnreadableRequestBody is the Shape B body for an answer net/http writes
// on its own, before any handler (bad request line, oversized headers):
// the same JSON the controller gets for every other error. detail is
// net/http's own reason, when it gave one.
func UnreadableRequestBody(code int, reason, detail string) []byte {
	desc := unreadableDesc[code]
	switch {
	case detail != "" && desc != "":
		desc += " (" + detail + ")"
	case detail != "":
		desc = detail
	}
	if reason == "" {
		reason = http.StatusText(code)
	}
	body, _ := json.Marshal(frameworkError{Error: fmt.Sprintf("%d %s: %s", code, reason, desc), HTTPCode: code})
	return body
}

// diskFullText is what every answer to a failure caused by a full disk
// says, whatever the route, so the operator sees the cause in the
// controller's log instead of a bare 500.
const diskFullText = "No space left on device"

func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFullBody is the Shape A body of a failure caused by a full disk:
// the failure's own message when it has one, and details that say the
// disk is full.
func diskFullBody(fe *fault.Error, err error) message {
	msg, details := diskFullText, err.Error()
	if fe.Framework && fe.Cause != nil {
		details = fe.Cause.Error()
	}
	if !fe.Framework && fe.Message != "" {
		msg, details = fe.Message, fe.Details
	}
	if !strings.Contains(strings.ToLower(details), strings.ToLower(diskFullText)) {
		details = strings.TrimSuffix(diskFullText+": "+details, ": ")
	}
	return message{Message: msg, Details: &details}
}
