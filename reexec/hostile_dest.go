//go:build pullhelper_hostile

package reexec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
