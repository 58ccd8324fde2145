package dest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// flip changes one byte of a staged file, keeping its size.
func flip(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	b[len(b)/2] ^= 0xff
	must(t, os.WriteFile(path, b, 0o644))
}

// A stage whose store checks each layer's digest as it ingests the blob
// (containerd:, whose content writer commits only what hashes to the
// digest it was told) leaves the layers' digests to it: Verify passes a
// layer of the right size that does not hash to its name, and nothing is
// hashed ahead. The config, which the parent reads, is hashed as before;
// elsewhere such a layer fails Verify.
func TestStoreChecksLeaveLayerDigests(t *testing.T) {
	needRoot(t)
	im := newImg("x")
	blob := func(st *dest.Stage, b []byte) string {
		return filepath.Join(st.WorkPath, "image", "blobs", "sha256", sha(b)[7:])
	}
	for _, checks := range []bool{false, true} {
		dd, st, e, _ := staged(t, im)
		dest.SetStoreChecks(st, checks)
		flip(t, blob(st, im.layer))
		err := dd.Verify(bg, st, e)
		switch {
		case checks && err != nil:
			t.Errorf("store checks: Verify hashed the layer: %v", err)
		case !checks && (failure.CodeOf(err) != failure.Verification || !strings.Contains(err.Error(), "digest mismatch")):
			t.Errorf("no store checks: a layer that does not hash to its name passed Verify (%v)", err)
		}
	}

	dd, st, e, _ := staged(t, im)
	dest.SetStoreChecks(st, true)
	flip(t, blob(st, im.config))
	if err := dd.Verify(bg, st, e); failure.CodeOf(err) != failure.Verification || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("store checks: a config that does not hash to its name passed Verify (%v)", err)
	}

	od := parse(t, "oci:"+filepath.Join(t.TempDir(), "d"))
	ost, err := od.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer ost.Remove()
	p, err := ost.OpenPartial(nil, nil)
	must(t, err)
	defer p.Close()
	dest.SetStoreChecks(ost, true)
	if h := p.Prehash(1<<30, nil, nil); h != nil {
		h.Abort()
		t.Error("store checks: blobs are hashed ahead")
	}
}
