//go:build pullhelper_hostile

package reexec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Actions of a compromised child against the staging area and DEST (issue
// 10 items 2, 3, 8): each runs after the copy, as the pull uid, on what the
// child sees of staging (/tmp/stage).
func init() {
	stagedImage := func(e *hostileEnv) string { return filepath.Join(e.Req.Stage.Work, e.Req.Stage.Name) }
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: "+format+"\n", args...)
	}
	// symlink-image: replace the staged image by a symlink to
	// $PULLHELPER_HOSTILE_ARG (a directory the attacker wants root to
	// chmod/chown or write into).
	registerHostile("symlink-image", func(e *hostileEnv) (bool, int) {
		img := stagedImage(e)
		if err := os.Rename(img, img+".real"); err != nil {
			say("symlink-image: %v", err)
			return true, 103
		}
		if err := os.Symlink(os.Getenv(hostileArgVar), img); err != nil {
			say("symlink-image: %v", err)
			return true, 103
		}
		say("symlink-image: %s -> %s", img, os.Getenv(hostileArgVar))
		return false, 0
	})
	// extra-blob: add a well-formed blob no manifest names.
	registerHostile("extra-blob", func(e *hostileEnv) (bool, int) {
		data := []byte("a blob no manifest names\n")
		sum := sha256.Sum256(data)
		p := filepath.Join(stagedImage(e), "blobs", "sha256", hex.EncodeToString(sum[:]))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			say("extra-blob: %v", err)
			return true, 103
		}
		say("extra-blob: wrote %s", p)
		return false, 0
	})
	// second-tag: add an index.json entry naming another tag for the same
	// manifest (to move a tag of a shared layout).
	registerHostile("second-tag", func(e *hostileEnv) (bool, int) {
		p := filepath.Join(stagedImage(e), "index.json")
		b, err := os.ReadFile(p)
		var idx map[string]any
		if err == nil {
			err = json.Unmarshal(b, &idx)
		}
		ms, _ := idx["manifests"].([]any)
		if err != nil || len(ms) == 0 {
			say("second-tag: %v", err)
			return true, 103
		}
		first, _ := ms[0].(map[string]any)
		extra := map[string]any{}
		for k, v := range first {
			extra[k] = v
		}
		extra["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "victim"}
		idx["manifests"] = append(ms, extra)
		if b, err = json.Marshal(idx); err == nil {
			err = os.WriteFile(p, b, 0o644)
		}
		if err != nil {
			say("second-tag: %v", err)
			return true, 103
		}
		say("second-tag: added tag victim")
		return false, 0
	})
}

func init() {
	// dump-request: print the request as the child received it (secrets
	// included: this build is for tests only, and the tests check paths).
	registerHostile("dump-request", func(e *hostileEnv) (bool, int) {
		b, _ := json.Marshal(e.Req)
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: request %s\n", b)
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: mountinfo %q\n", mi)
		return false, 0
	})
}

func init() {
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: "+format+"\n", args...)
	}
	// foreign-urls: give the staged manifest's first layer "urls":
	// [$PULLHELPER_HOSTILE_ARG] (the layer stays staged byte for byte),
	// and report that manifest as the one pulled and served (issue 22
	// item 8: an import reading the layout through containers/image's
	// oci: source would fetch the URL, as root, in the host's network).
	registerHostile("foreign-urls", func(e *hostileEnv) (bool, int) {
		img := filepath.Join(e.Req.Stage.Work, e.Req.Stage.Name)
		fail := func(err error) (bool, int) {
			say("foreign-urls: %v", err)
			return true, 103
		}
		ib, err := os.ReadFile(filepath.Join(img, "index.json"))
		if err != nil {
			return fail(err)
		}
		var idx map[string]any
		if err := json.Unmarshal(ib, &idx); err != nil {
			return fail(err)
		}
		ms, _ := idx["manifests"].([]any)
		if len(ms) != 1 || e.Report == nil {
			return fail(fmt.Errorf("want one staged manifest and the report"))
		}
		entry, _ := ms[0].(map[string]any)
		old, _ := entry["digest"].(string)
		oldPath := filepath.Join(img, "blobs", "sha256", strings.TrimPrefix(old, "sha256:"))
		mb, err := os.ReadFile(oldPath)
		if err != nil {
			return fail(err)
		}
		var m map[string]any
		if err := json.Unmarshal(mb, &m); err != nil {
			return fail(err)
		}
		layers, _ := m["layers"].([]any)
		if len(layers) == 0 {
			return fail(fmt.Errorf("the manifest has no layers"))
		}
		l0, _ := layers[0].(map[string]any)
		l0["urls"] = []string{os.Getenv(hostileArgVar)}
		nb, err := json.Marshal(m)
		if err != nil {
			return fail(err)
		}
		sum := sha256.Sum256(nb)
		nd := "sha256:" + hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(img, "blobs", "sha256", hex.EncodeToString(sum[:])), nb, 0o644); err != nil {
			return fail(err)
		}
		if err := os.Remove(oldPath); err != nil {
			return fail(err)
		}
		entry["digest"], entry["size"] = nd, len(nb)
		if ib, err = json.Marshal(idx); err == nil {
			err = os.WriteFile(filepath.Join(img, "index.json"), ib, 0o644)
		}
		if err != nil {
			return fail(err)
		}
		e.Report.Digest = nd
		e.Report.Copied.Served, e.Report.Copied.Manifest = nb, nb
		say("foreign-urls: layer %v now has urls, manifest %s", l0["digest"], nd)
		return false, 0
	})
}
