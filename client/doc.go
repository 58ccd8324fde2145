// Package client spawns the pullhelper binary for a Go program (a node
// agent) and turns its contract into Go values: the result and progress
// events as package api's types (shared with the binary, not copied), its
// exit codes and JSON error objects as sentinel errors
// (errors.Is(err, client.ErrUnauthorized)).
//
//	res, err := client.Pull(ctx, client.Request{
//		Image:       "registry.example.com/os/update:4.18",
//		Dest:        "oci:/var/lib/updates/next",
//		PullSecrets: [][]byte{secretJSON},
//		OnEvent:     func(e api.Event) { log.Println(e.Type, e.Digest, e.Bytes) },
//	})
//
// Invariants:
//   - Inline secrets (Request.PullSecrets, AuthFile, ServiceAccountToken,
//     ProviderServiceAccountToken) reach the helper only through pipes it
//     inherits (--pull-secret-fd, --authfile-fd, --service-account-token-fd,
//     --provider-service-account-token-fd):
//     never argv, the environment, a file or an error message.
//   - A pull is only started with a binary whose `pullhelper version`
//     reports a protocol at least api.Protocol (ErrProtocol otherwise).
//   - When ctx ends, the helper gets SIGTERM, so that it kills its pull
//     child and removes its cgroup and staging; SIGKILL follows only after
//     Client.Grace. Pull returns only once the helper has exited.
//   - OnEvent gets every event the helper wrote, done or error included,
//     however slow it is: after the helper exited the pipe is drained until
//     EOF, or until no byte came for 5 s.
//   - A success has a result with a digest; a crash (a bare exit 2), a
//     death by a signal the client did not send, or exit 0 without a
//     result is ErrInternal.
//   - The package imports the standard library and package api only (a
//     depcheck test enforces it): no containers/image, no cgroups library.
package client
