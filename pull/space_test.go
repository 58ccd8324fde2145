package pull

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/docker/reference"
	"golang.org/x/sys/unix"
)

// A full disk while containers/image writes staging is exit 9 whatever
// wraps it, and the message says so in the user's terms.
func TestClassifyFullDisk(t *testing.T) {
	p := &Request{Reference: "r.example/x:latest", Registry: "r.example"}
	for errno, want := range map[syscall.Errno]string{
		syscall.ENOSPC: "no space left on DEST's filesystem",
		syscall.EDQUOT: "the disk quota on DEST's filesystem is exhausted",
		syscall.EROFS:  "DEST's filesystem is read-only",
	} {
		// As copy.Image returns it: the destination's write error under
		// "writing blob", joined with the source's view.
		err := fmt.Errorf("writing blob: %w", &fs.PathError{Op: "write", Path: "/tmp/stage/image.tar", Err: errno})
		err = errors.Join(err, errors.New("(dest: write /tmp/stage/image.tar)"))
		got := p.classify(err)
		if failure.CodeOf(got) != failure.Destination || failure.CodeOf(got).Exit() != 9 {
			t.Errorf("%v: code %s, want destination", errno, failure.CodeOf(got))
		}
		if !strings.HasPrefix(got.Error(), want) {
			t.Errorf("%v: message %q does not start with %q", errno, got, want)
		}
	}
}

func layerManifest(config, layer digest.Digest, size int64) []byte {
	return []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":100},
"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`, config, layer, size))
}

func TestCheckSpace(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	cfg, layer := digest.FromString("config"), digest.FromString("layer")
	named, _ := reference.ParseNormalizedNamed("r.example/x:latest")
	mime := "application/vnd.oci.image.manifest.v1+json"
	check := func(transport string, size int64, known []target.KnownBlob) error {
		p := &Request{Reference: "r.example/x:latest", Destination: target.Spec{Transport: transport}}
		_, err := p.checkSpace(t.Context(), nil, named, "", layerManifest(cfg, layer, size), mime, nil, nil, &Stage{Work: dir, Known: known})
		return err
	}
	// Far more than the disk: refused, naming both numbers.
	err := check("oci", free*4, nil)
	var need, has int64
	if failure.CodeOf(err) != failure.Destination || err == nil {
		t.Fatalf("4x free: %v", err)
	}
	msg := err.Error()[strings.Index(err.Error(), "needs "):]
	if _, serr := fmt.Sscanf(msg, "needs %d bytes", &need); serr != nil || need <= free*4 ||
		!strings.Contains(msg, "DEST's filesystem has ") {
		t.Fatalf("4x free: %v", err)
	}
	if _, serr := fmt.Sscanf(msg[strings.Index(msg, "has "):], "has %d free", &has); serr != nil || has <= 0 {
		t.Fatalf("4x free: %v", err)
	}
	// What the resolved event announces: the config and the layer as
	// declared, DEST's blobs included.
	p := &Request{Reference: "r.example/x:latest", Destination: target.Spec{Transport: "oci"}}
	decl, err := p.checkSpace(t.Context(), nil, named, "", layerManifest(cfg, layer, 1000), mime, nil, nil,
		&Stage{Work: dir, Known: []target.KnownBlob{{Digest: layer.String(), Size: 1000}}})
	if err != nil || *decl != (declared{layers: 1, size: 1100, configSize: 100}) {
		t.Fatalf("declared %+v, %v", decl, err)
	}
	// The same layer, already in DEST: nothing to fetch.
	if err := check("oci", free*4, []target.KnownBlob{{Digest: layer.String(), Size: free * 4}}); err != nil {
		t.Fatalf("known layer: %v", err)
	}
	// 60 % of the free space fits an oci: DEST, not an archive (twice).
	if err := check("oci", free*6/10, nil); err != nil {
		t.Fatalf("oci 60%%: %v", err)
	}
	if err := check("docker-archive", free*6/10, nil); failure.CodeOf(err) != failure.Destination {
		t.Fatalf("docker-archive 60%%: %v", err)
	}
}
