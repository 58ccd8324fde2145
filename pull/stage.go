package pull

import (
	"os"
	"path/filepath"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// Stage is the staging area as the copy sees it. It must be
// JSON-representable (it crosses the pipe to the child).
type Stage struct {
	// Work is the work directory: containers/image writes Name inside it,
	// and large temporary files go there (DEST's filesystem). In the child
	// it is /tmp/stage, a mount of the directory the parent holds.
	Work string `json:"work"`
	// Name is what the copy writes inside Work ("image" or "image.tar").
	Name string `json:"name"`
	// Known are the blobs DEST already has: reported as present, not read.
	Known []target.KnownBlob `json:"known,omitempty"`
	// Config is where the copy writes its configuration and key material
	// (certificates, auth file, registries.conf): the child's private
	// tmpfs; in process (--no-isolation), a tmpfs mounted nowhere that the
	// parent holds by descriptor, /proc/self/fd/N: never on a disk.
	Config string `json:"config"`
	// Partial is DEST's partial-blob cache ("" for none): the copy keeps
	// the bytes of each blob it receives there until the blob is complete,
	// and resumes a blob it finds there with a Range request (partial.go).
	// In the child it is /tmp/partial, a mount of the directory the parent
	// holds.
	Partial string `json:"partial,omitempty"`
	// HandOver: whole blobs may stay in the partial-blob cache for the
	// parent to move into the staged OCI layout (Copied.Handed) instead of
	// being written twice. The parent sets it when it can rename from the
	// cache into staging (one mount) and the uid is the pull's alone.
	HandOver bool `json:"hand_over,omitempty"`
	// NoSync: the copy syncs nothing it stages, neither the partial-blob
	// cache nor the staged image (syncTree); containers/image's OCI
	// destination still syncs each blob it writes itself (a config, a
	// blob not handed over). The parent sets it when DEST is a store,
	// into which the staged blobs are read, never published as files
	// (dest.Stage.NoSync). A kill loses nothing of a kept prefix either
	// way (the page cache keeps it); a power loss may, and a prefix that
	// came back wrong fails its blob's digest check and is fetched again.
	NoSync bool `json:"no_sync,omitempty"`

	// spare is the free space of DEST's filesystem beyond what the image
	// needs (set by checkSpace): all the partial-blob cache may append.
	spare int64
}

func (s *Stage) path() string { return filepath.Join(s.Work, s.Name) }

// reset empties the staged image between attempts.
func (s *Stage) reset() error {
	if err := os.RemoveAll(s.path()); err != nil {
		return failure.Wrap(failure.Destination, err, "clearing the staged image")
	}
	return nil
}
