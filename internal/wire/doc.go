// Package wire holds the values the parent resolves for one pull and hands
// to the copy in its request: the endpoints contacted (Endpoint, with its
// Capabilities), each endpoint's credential candidates (Credential, whose
// secrets never marshal) and TLS trust (Trust), and the containers auth
// files searched (AuthFile). Package hosts fills endpoints and trust,
// package auth the credentials; pull reads them in the child.
//
// Invariant: wire imports only the standard library, so that the copy (and
// anything else that decodes a request) links no credential source, no
// configuration parser and no containers/image.
package wire
