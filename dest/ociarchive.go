package dest

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
)

func init() {
	register("oci-archive", kind{new: func(s Spec) (Destination, error) {
		d := &ociArchiveDest{archiveBase{base{s}, ociArchiveKind}}
		if s.Ref != "" {
			if _, err := target.StagedReference(s, "/", nil); err != nil {
				return nil, err
			}
		}
		return d, nil
	}})
}

// ociArchiveKind: an oci-layout member as the image-spec defines it (an
// object with imageLayoutVersion), which containers/image's oci/archive
// writes, like every OCI layout.
var ociArchiveKind = archiveKind{what: "an OCI archive (a tar of an OCI layout)", member: "oci-layout", valid: func(b []byte) bool {
	var l struct {
		ImageLayoutVersion *string `json:"imageLayoutVersion"`
	}
	return json.Unmarshal(b, &l) == nil && l.ImageLayoutVersion != nil
}}

// ociArchiveDest is oci-archive:PATH[:TAG], a tar of an OCI layout holding
// one image; a commit replaces the file.
type ociArchiveDest struct{ archiveBase }

func (d *ociArchiveDest) Stage(o StageOptions) (*Stage, error) { return d.stage(o) }

func (d *ociArchiveDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := checkExpect(e); err != nil {
		return err
	}
	f, err := takeBackFile(s)
	if err != nil {
		return verr(err)
	}
	defer f.Close()
	ts, err := readTar(f, func(n string) string {
		if a, _, ok := strings.Cut(strings.TrimPrefix(n, "blobs/"), "/"); ok && strings.HasPrefix(n, "blobs/") {
			return a
		}
		return ""
	}, e.MaxBytes)
	if err != nil {
		return verr(err)
	}
	if len(ts.symlinks) > 0 {
		for n := range ts.symlinks {
			return verr(badStaged("archive member %s is a symbolic link", n))
		}
	}
	res, err := verifyOCI(ctx, ts, e, d.spec.Ref, nil)
	if err == nil {
		err = ts.unused(func(string) bool { return false })
	}
	if err != nil {
		return verr(err)
	}
	s.verified = &verified{oci: res}
	s.Counts = res.counts
	return nil
}

func (d *ociArchiveDest) Commit(ctx context.Context, s *Stage) error { return d.commitFile(s) }
