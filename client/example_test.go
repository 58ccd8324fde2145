package client_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/client"
)

// An OS update pulled with an in-memory pull secret, progress and typed
// errors. (Compiled, not run: it needs a registry.)
func Example() {
	secret, err := os.ReadFile("/run/agent/pull-secret.json") // or from the API server
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := &client.Client{Binary: "/usr/libexec/pullhelper", Grace: 15 * time.Second}
	res, err := c.Pull(ctx, client.Request{
		Image:       "image-registry.openshift-image-registry.svc:5000/openshift/os:4.18",
		Dest:        "oci:/var/lib/os-updates/next",
		Profile:     "os-update",
		PullSecrets: [][]byte{secret},
		OnEvent: func(e api.Event) {
			if e.Type == api.EventLayerProgress {
				log.Printf("%s %d/%d", e.Digest, e.Bytes, e.Size)
			}
		},
	})
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		log.Fatal("refresh the pull secret: ", err)
	case errors.Is(err, client.ErrNetwork):
		log.Fatal("retry later: ", err)
	case err != nil:
		log.Fatal(err)
	}
	log.Printf("pulled %s (%d bytes)", res.Reference, res.Bytes)
}
