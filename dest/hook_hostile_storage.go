//go:build pullhelper_hostile

package dest

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"go.podman.io/storage"
)

// This file exists only in the test build bin/pullhelper-hostile (build tag
// pullhelper_hostile, never in the release binary). It stops the root
// parent in the middle of a containers-storage: import, to kill it there:
// $PULLHELPER_HOSTILE_IMPORT=hold-after-layer holds the import once its
// first layer is in the store (before the image record exists), saying so
// on stderr. =hang-read makes the import's first blob read hang, deaf to
// the pull's context (as a store lock another process holds would), and
// =stall-read until the context is done: the pull must still end on its
// deadline or a signal.
func init() {
	// $PULLHELPER_HOSTILE_CHECKED=fifo-after-check replaces storage.conf by
	// a FIFO right after root checked it, as its directory's owner may:
	// c/storage must read the checked bytes, not open the path again.
	if os.Getenv("PULLHELPER_HOSTILE_CHECKED") == "fifo-after-check" {
		checkedHook = func(path string) {
			tmp := path + ".hostile-fifo"
			if err := syscall.Mkfifo(tmp, 0o644); err == nil && os.Rename(tmp, path) == nil {
				fmt.Fprintf(os.Stderr, "pullhelper: hostile: %s is now a FIFO\n", path)
			}
		}
	}
	switch os.Getenv("PULLHELPER_HOSTILE_IMPORT") {
	case "hold-after-layer":
		importHook = func(store storage.Store, blob digest.Digest) {
			// Done is reported when the blob's bytes were read: wait
			// (bounded) for the store to record the layer.
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				layers, err := store.LayersByCompressedDigest(blob)
				if err == nil && len(layers) > 0 {
					fmt.Fprintf(os.Stderr, "pullhelper: hostile: holding the import with layer %s in the store\n", blob)
					time.Sleep(time.Hour) // until the test kills this process
				}
			}
		}
	case "hang-read":
		importReadHook = func(_ context.Context, blob string) {
			fmt.Fprintf(os.Stderr, "pullhelper: hostile: the import hangs reading %s\n", blob)
			time.Sleep(time.Hour) // deaf to the context: until the process ends
		}
	case "stall-read":
		importReadHook = func(ctx context.Context, blob string) {
			fmt.Fprintf(os.Stderr, "pullhelper: hostile: the import stalls reading %s\n", blob)
			<-ctx.Done()
		}
	}
}
