// Package egress builds the HTTP client the appview uses to talk to
// strangers: PLC directories, did:web hosts, handle well-known endpoints and
// PDSes named in DID documents.
//
// Every destination is untrusted, so the client speaks only http and https,
// goes through no proxy, follows few redirects, bounds the whole exchange with
// a timeout, and refuses to connect to loopback, private, link-local, CGNAT,
// multicast and unspecified addresses unless private networks are allowed.
// The address check runs in the dialer's Control hook, on the IP the socket is
// about to connect to, so a hostname that resolves (or re-resolves) to an
// internal address is caught as surely as an IP literal.
package egress
