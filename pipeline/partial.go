package pipeline

import (
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
)

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
