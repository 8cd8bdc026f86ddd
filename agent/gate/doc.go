// Package gate is the agent's front door: it accepts TCP connections,
// completes their TLS handshakes with a deadline, and hands the HTTP server
// only connections whose mutual-TLS handshake succeeded.
//
// net/http would start a goroutine with TLS buffers for every accepted
// connection and keep it until its handshake timeout, so a few thousand idle
// or slow connections cost tens of megabytes and, with a plain connection
// cap, would make a controller queue behind them. Here the accept loop never
// waits: handshakes in progress are bounded, and beyond the bound the oldest
// one is dropped, so a new client always gets its turn while a flood only
// displaces itself.
//
// As the binary sets it up: at most 128 handshakes in progress, each
// given 10 s; the 129th connection pushes out the oldest unfinished one.
// The system tier's flood of 3,000 idle and slow connections checks that a
// controller is still served within 1 s. The
// client certificate is verified against agent_server_ca, and the server
// certificate file is checked for changes on every handshake (package
// certs). Failed handshakes are logged at most once per 10 s, with the
// number held back since the last line. A failed accept (out of file
// descriptors) is tried again after a pause (package agent/acceptretry).
//
// net/http writes some answers itself, for requests it cannot read: a
// malformed request line, a header block over 64 KiB, an unknown transfer
// encoding, HTTP version or Expect (400, 431, 501, 505, 417). The gate
// recognises net/http's fixed plain-text framing of those answers and
// re-renders them as the JSON body every other error has
// (api.UnreadableRequestBody); handler answers never have that framing.
package gate
