// Package certs owns the agent's TLS material: the mutual-TLS server
// configuration (client certificate required, server certificate re-read
// from disk so rotation needs no restart), validation of rotated server
// certificates, and the store of the listeners' certificates (Store).
//
// # Rotating the server certificate
//
// PUT /1.0/certificate is refused (400 "Invalid certificate", the details
// saying why) only when the new pair would certainly lock the controller
// out (ValidateServerPEM):
//
//   - no key matching the certificate;
//   - a name other than this amphora's amphora_id, the way the controller
//     checks it: its DNS names, or its CN when it has none (the controller
//     issues CN = DNS SAN = amphora id);
//   - a NotAfter before its NotBefore, or expired by more than 24 hours
//     by the amphora's clock (ExpiryTolerance);
//   - a chain TLS cannot carry: a server sends its whole chain in one
//     handshake message, which clients cap (the controller's OpenSSL at
//     100 KiB: a rotation to 300 copies of a certificate was once taken
//     and every handshake after it failed with EXCESSIVE_MESSAGE_SIZE), so
//     more than MaxChainCertificates (10) certificates or MaxChainBytes
//     (32 KiB) of DER is refused; the controller sends one certificate of
//     about 0.8 KB (RSA 2048);
//   - a pair a TLS handshake fails with. Before the new pair replaces the
//     old one, the agent completes a TLS 1.2 and a TLS 1.3 handshake with
//     it over an in-memory pipe: every certificate of the chain must parse
//     and the key must sign. That client does not verify the chain (the
//     agent holds the CA of the controller's certificates, not of its own)
//     nor its dates.
//
// The controller stamps NotBefore with its own clock, uploads at once and
// later checks the certificate with its own clock, so the amphora's clock
// only tells how far the two differ: a certificate not valid yet by it (an
// amphora clock lagging by any amount), or expired for at most 24 hours
// (one running ahead), is accepted and served, with one warning giving the
// difference (valid_in or expired_for). Nothing else looks at the server
// certificate's validity: start-up and the re-read on each handshake load
// it as it is (as Go's TLS server does), and amphora-agent status does not
// read it. Why these refusals are safe with a real controller:
// compatibility item 2 in docs/compatibility.md.
package certs
