package dest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// handOverStage pulls im into a fresh oci: stage, then moves its layer
// from the staged layout into the stage's partial-blob cache, where the
// copy leaves a blob it handed over (pull's guardedDest.PutBlob).
func handOverStage(t *testing.T, im img, content []byte) (dest.Destination, *dest.Stage, *dest.Partial, dest.Expect, string) {
	t.Helper()
	d := parse(t, "oci:"+filepath.Join(t.TempDir(), "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	t.Cleanup(st.Remove)
	p, err := st.OpenPartial(nil, nil)
	must(t, err)
	t.Cleanup(p.Close)
	e := pull(t, d, st, source(t, im), nil)
	hx := sha(im.layer)[len("sha256:"):]
	staged := filepath.Join(st.WorkPath, st.Name, "blobs", "sha256", hx)
	must(t, os.Remove(staged))
	must(t, os.WriteFile(filepath.Join(p.Path, "sha256-"+hx+".partial"), content, 0o600))
	return d, st, p, e, staged
}

// A handed-over blob lands in the staged layout and commits; names that
// are not a digest, or a digest with nothing in the cache, move nothing.
func TestHandOverCommits(t *testing.T) {
	needRoot(t)
	im := newImg("handed")
	d, st, p, e, staged := handOverStage(t, im, im.layer)
	n, err := p.HandOver(st, []string{"sha256:" + "zz", "../x", "sha256:" + sha([]byte("absent"))[7:], sha(im.layer)})
	must(t, err)
	if n != 1 {
		t.Fatalf("HandOver moved %d blobs, want 1", n)
	}
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("the handed blob is not in staging: %v", err)
	}
	must(t, d.Verify(bg, st, e))
	must(t, d.Commit(bg, st))
	got, err := os.ReadFile(filepath.Join(d.Spec().Path, "blobs", "sha256", sha(im.layer)[7:]))
	must(t, err)
	if string(got) != string(im.layer) {
		t.Fatal("DEST's layer is not the handed-over bytes")
	}
}

// The moved file is hashed like any staged one: wrong bytes under the
// blob's name fail verification (exit 8), nothing is committed.
func TestHandOverIsVerified(t *testing.T) {
	needRoot(t)
	im := newImg("handed-wrong")
	bad := append([]byte{}, im.layer...)
	bad[len(bad)/2] ^= 0xff
	d, st, p, e, _ := handOverStage(t, im, bad)
	_, err := p.HandOver(st, []string{sha(im.layer)})
	must(t, err)
	err = d.Verify(bg, st, e)
	if failure.CodeOf(err) != failure.Verification {
		t.Fatalf("Verify = %v (%s), want a verification failure", err, failure.CodeOf(err))
	}
	if _, err := os.Stat(d.Spec().Path); !os.IsNotExist(err) {
		t.Fatalf("DEST exists after a failed verification: %v", err)
	}
}

// A staged layout whose blobs directory is a symbolic link (the copy's
// uid planted it) is never followed: HandOver fails and writes nothing
// where the link points.
func TestHandOverRefusesSymlinkedBlobs(t *testing.T) {
	needRoot(t)
	im := newImg("handed-link")
	_, st, p, _, _ := handOverStage(t, im, im.layer)
	img := filepath.Join(st.WorkPath, st.Name)
	outside := t.TempDir()
	must(t, os.RemoveAll(filepath.Join(img, "blobs")))
	must(t, os.Symlink(outside, filepath.Join(img, "blobs")))
	_, err := p.HandOver(st, []string{sha(im.layer)})
	if failure.CodeOf(err) != failure.Verification {
		t.Fatalf("HandOver = %v (%s), want a verification failure", err, failure.CodeOf(err))
	}
	ents, err := os.ReadDir(outside)
	must(t, err)
	if len(ents) != 0 {
		t.Fatalf("HandOver wrote through the symlink: %v", ents)
	}
}

// A blob the copy also wrote into staging stays as staged (the cache's
// copy is not moved over it).
func TestHandOverKeepsStaged(t *testing.T) {
	needRoot(t)
	im := newImg("handed-twice")
	_, st, p, _, staged := handOverStage(t, im, []byte("not the blob"))
	must(t, os.WriteFile(staged, im.layer, 0o644))
	n, err := p.HandOver(st, []string{sha(im.layer)})
	must(t, err)
	got, rerr := os.ReadFile(staged)
	must(t, rerr)
	if n != 0 || string(got) != string(im.layer) {
		t.Fatalf("HandOver moved %d and staging holds %d bytes; want 0 moved and the staged blob kept", n, len(got))
	}
}
