// Package registry is pullhelper's own client of the OCI distribution API:
// it fetches manifests and blobs from an ordered list of endpoints (the
// mirrors a runtime would try, then the registry), the way containerd's
// resolver and fetcher walk their hosts.
//
// What it does, per endpoint: its own TLS configuration and connect timeout
// (containerd dial_timeout, 30 s by default), its own extra headers
// (hosts.toml header, sent on every request to the host and to its token
// realm, as containerd's authorizer does), its API root (a path prefix or
// override_path), the "ns" query parameter of registry proxying, and its own
// credential: Basic, or a bearer token fetched from the realm its challenge
// names (a GET with Basic credentials, or an OAuth2 refresh-token POST with
// an identity token, as containers/image does; with Credential.OAuthFallback,
// containerd's credentials, a username and password are POSTed too, as an
// OAuth2 password grant, and a POST answered 404, 401 or 400 (405 for a
// password) is asked again as a GET with Basic credentials, as containerd's
// authorizer does). An insecure endpoint
// (HTTPFallback) is first pinged at its API root over https and then over
// plain http, and uses http when only that answers (containers/image's
// detectPropertiesHelper). A containerd host written http:// with TLS
// settings (TLSFallback) is asked over https and, when a request fails
// because the host answered in plain HTTP, its TLS handshake timed out or
// (no port named) https was refused, the request and every later one go
// over http (containerd's httpFallback). A plain-http answer to https
// elsewhere is final.
//
// Fallback, as containerd does it: a tag is asked only of endpoints that
// may resolve; a manifest by digest and every blob are asked of each
// endpoint in order until one serves it; any failure to open (connect
// error, timeout, 401/403, 404, 429, 5xx) moves to the next endpoint. A blob
// whose body breaks off mid-way is resumed with a Range request, on the same
// endpoint first.
//
// Invariants:
//   - A credential or token is sent only to the endpoint it belongs to and
//     to the token realm that endpoint's challenge names, after the caller's
//     Realm hook accepted that realm. A challenge is learned only from the
//     endpoint's own origin (never from a redirect target's 401). On a
//     redirect to another origin the Authorization header and the
//     endpoint's own headers are dropped, and a token POST (its body holds
//     the identity token) is not followed.
//   - No error text holds what was sent (the credential, its Basic
//     encoding, the identity token, header values, tokens granted), nor
//     any of them as a server may echo it (JSON-escaped, decoded, quoted,
//     percent-encoded), nor a failed URL's query, and a server's text in it
//     is printable ASCII, bounded.
//   - Every request URL (to the endpoint, its realm, a redirect target)
//     passes the caller's Proxy hook, with the endpoint it is made for,
//     before a connection is made, so the caller can refuse it (per
//     endpoint) and record which host served what.
//   - Everything a server sends is bounded: manifests by the caller's limit,
//     an answer's headers to 1 MiB (at most 16 challenges of 32
//     parameters kept), error bodies to 64 KiB, token responses to 1 MiB,
//     redirects to 10,
//     a Retry-After to 5 minutes, the wait for an answer's headers to the
//     endpoint's HeaderTimeout. Blob bodies are not bounded here; the
//     caller caps them (bytes skipped of a full answer to a Range request
//     go to its Discard hook).
//   - The package imports nothing of pullhelper but internal packages: it
//     knows no policy, credential source or isolation.
package registry
