package pipeline

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
)

// prehash starts hashing handed-over blobs ahead (dest.Partial.Prehash)
// with the SIGIO handler its read leases need, installed here (by the
// owner of the process, not by dest) and removed once the hashing is over.
func prehash(part *dest.Partial, maxBytes int64) *dest.Prehash {
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, syscall.SIGIO)
	return part.Prehash(maxBytes, sigio, func() { signal.Stop(sigio) })
}

// wanting passes events on, and tells the partial-blob cache which blobs
// the image asks for (each blob's digest and declared size, as the copy
// announces it when it starts the blob): when the cache is taken back from
// the child it keeps only those, each at most its declared size, in all at
// most the image's limit (dest.Partial.Want) — unless the parent checked the
// manifest itself (pinned: dest.Partial.Restrict), whose blobs then count
// instead of the child's announcements.
func wanting(part *dest.Partial, events func(api.Event)) func(api.Event) {
	if part == nil {
		return events
	}
	return func(e api.Event) {
		if e.Type == api.EventLayerStart || e.Type == api.EventConfigStart {
			part.Want(e.Digest, e.Size)
		}
		if events != nil {
			events(e)
		}
	}
}
