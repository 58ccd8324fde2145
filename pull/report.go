package pull

import (
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// Report is what the copy says it did: the child's claims, nothing more. It
// is the child's side of the protocol (sent on its event pipe); the parent
// never repeats it as it is: the pipeline builds api.Result from the plan
// and from what it verified itself, field by field, and bounds the few
// informational fields (attempts, endpoints) it repeats.
type Report struct {
	// Digest is the top-level manifest (or index) digest the copy pinned;
	// MediaType the type the registry served it with (not repeated: the
	// result's is read from the verified manifest).
	Digest    string `json:"digest"`
	MediaType string `json:"media_type"`
	// InstanceDigest is the per-platform manifest copied from an index
	// ("" otherwise, or with every instance copied).
	InstanceDigest string `json:"instance_digest,omitempty"`
	// DestinationDigest is the stored manifest's digest when the
	// destination converted it (docker-archive: Docker schema 2).
	DestinationDigest string `json:"destination_digest,omitempty"`
	// Layers and Bytes are the copy's tally: layers done (copied or
	// already there), and the declared sizes of every blob done. The
	// parent does not repeat them: the result's are what it verified.
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
	// Attempts are the attempts made over every credential round.
	Attempts int `json:"attempts"`
	// Credential is the candidate the registry accepted, as the copy was
	// given it (or anonymous).
	Credential *api.Credential `json:"credential,omitempty"`
	// Endpoints are the hosts that served the successful attempt, with
	// the blob bytes each sent; KeptBytes the bytes the partial-blob cache
	// served instead (resumed blobs' kept prefixes), which no host sent.
	Endpoints []api.EndpointUse `json:"endpoints,omitempty"`
	KeptBytes int64             `json:"kept_bytes,omitempty"`
	// Copied is what the parent verifies the staged image against.
	Copied Copied `json:"copied"`
}

// The report crosses the child's event pipe as one line, which the parent
// reads into memory: its parts are bounded. Three manifests (the stored
// one, the index and the one served) are each at most MaxManifestBytes;
// the signatures handed over for the parent's re-check at most
// MaxSignatures of at most MaxSignatureBytes in all.
const (
	MaxSignatures     = 256
	MaxSignatureBytes = 4 << 20
)

// checkSignatures refuses more signatures than the report may carry.
func checkSignatures(sigs [][]byte) error {
	n := 0
	for _, s := range sigs {
		n += len(s)
	}
	if len(sigs) > MaxSignatures || n > MaxSignatureBytes {
		return failure.New(failure.Verification, "the registry served %d signatures (%d bytes) for the image: more than the %d (%d bytes) the signature policy is re-checked with",
			len(sigs), n, MaxSignatures, MaxSignatureBytes)
	}
	return nil
}
