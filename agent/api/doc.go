// Package api is the agent's REST surface as the Octavia controller calls
// it: routing, middleware, thin handlers, and the single place where errors
// become status codes and JSON bodies (writeError). The contract itself,
// every route with its answers, is in this package's README.md.
//
// # A request
//
// Package agent/gate has accepted the connection and completed mutual TLS
// before net/http reads a request from it. Then:
//
//  1. recoverPanics, accessLog and drainBody wrap everything: a panic
//     becomes upstream's 500 body instead of a dropped connection (which
//     the controller would retry for minutes); each request is logged
//     (GETs at debug level); what a handler left of the body is read
//     before the answer goes out, so a client that sends its whole body
//     first sees the answer and not a reset.
//  2. collapseSlashes turns runs of '/' into one (the controller asks for
//     version discovery as GET //), and gorilla/mux picks the route in
//     registration order, which is upstream's precedence where patterns
//     overlap. It never redirects.
//  3. A read runs under a 45 s budget (DefaultBudget, inside the
//     controller's 60 s read timeout). A mutation reads its body first,
//     under that deadline, once, into a buffer of its announced size, and
//     the handler gets those bytes; then the Agent waits for the mutation
//     lock as long as the client waits.
//  4. The handler makes one Agent call and writes its answer, or returns
//     the error for writeError.
//
// Bodies are opaque bytes (any Content-Type, no UTF-8 requirement) capped
// at max_upload_size, read for every request. A larger body is read and
// discarded, up to 1 GiB, then answered 400: the controller would count a
// 413 as success, and a dropped connection as a reason to retry for
// minutes.
package api
