package auth

// The per-node cache of provider responses (pluginProvider.cache with
// cacheKeyType and cacheDuration), kept on disk between pulls.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/state"
	"golang.org/x/sys/unix"
)

// ---- the per-node cache ----

type cpCacheEntry struct {
	ExpiresAt time.Time               `json:"expiresAt"`
	Auth      map[string]cpAuthConfig `json:"auth"`
}

type cpCache struct {
	Version     int                     `json:"version"`
	Provider    string                  `json:"provider"`
	Fingerprint string                  `json:"fingerprint"`
	Entries     map[string]cpCacheEntry `json:"entries"`
	path        string
}

// cpFingerprint hashes what the kubelet would have to restart to change.
// Env values may be secret, so only the hash is stored.
func cpFingerprint(p *CredentialProvider, binDir string) string {
	data, _ := json.Marshal(struct {
		Bin                  string
		APIVersion           string
		Args                 []string
		Env                  []ProviderEnvVar
		MatchImages          []string
		DefaultCacheDuration *time.Duration
		TokenAttributes      *ProviderTokenAttributes
	}{filepath.Join(binDir, p.Name), p.APIVersion, p.Args, p.Env, p.MatchImages, p.DefaultCacheDuration, p.TokenAttributes})
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// cpLoadCache returns the provider's cache, empty if the file is missing,
// malformed or from another configuration. A read error other than
// "missing" is returned alongside an empty cache.
func cpLoadCache(dir string, p *CredentialProvider, binDir string) (*cpCache, error) {
	c := &cpCache{
		Version: cpCacheVersion, Provider: p.Name, Fingerprint: cpFingerprint(p, binDir),
		Entries: map[string]cpCacheEntry{}, path: filepath.Join(dir, p.Name+".json"),
	}
	data, err := readCacheFile(dir, p.Name+".json")
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("credential provider %q: reading cache %s: %v", p.Name, c.path, cpPathErr(err))
	}
	var onDisk cpCache
	if json.Unmarshal(data, &onDisk) != nil || onDisk.Version != cpCacheVersion ||
		onDisk.Provider != c.Provider || onDisk.Fingerprint != c.Fingerprint {
		return c, nil
	}
	for k, e := range onDisk.Entries {
		c.Entries[k] = e
	}
	return c, nil
}

// get is getCachedCredentials: image, then registry, then global, each
// joined with the service account's key (generateCacheKey).
func (c *cpCache) get(image, saKey string, now time.Time) (map[string]cpAuthConfig, bool) {
	for _, key := range []string{image, strings.Split(image, "/")[0], cpGlobalKey} {
		if e, ok := c.Entries[cpCacheKey(key, saKey)]; ok && !now.After(e.ExpiresAt) {
			if e.Auth == nil {
				e.Auth = map[string]cpAuthConfig{}
			}
			return e.Auth, true
		}
	}
	return nil, false
}

func (c *cpCache) purge(now time.Time) {
	for k, e := range c.Entries {
		if now.After(e.ExpiresAt) {
			delete(c.Entries, k)
		}
	}
}

// readCacheFile reads name in the cache directory dir through its held
// descriptor (state.OpenExistingDir: only root can change it or anything
// above it), bounded like every file root reads for the caller.
func readCacheFile(dir, name string) ([]byte, error) {
	dfd, err := state.OpenExistingDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return safefs.ReadAtMost(dfd, name, safefile.MaxConfig)
}

// save writes the cache atomically with mode 0600 (it holds passwords),
// through the cache directory's held descriptor (state.OpenDir): a
// temporary file made with O_EXCL, synced, then renamed over the old one.
func (c *cpCache) save() error {
	fail := func(err error) error {
		return fmt.Errorf("credential provider %q: writing cache %s: %v", c.Provider, c.path, cpPathErr(err))
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fail(err)
	}
	dfd, err := state.OpenDir(filepath.Dir(c.path))
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	name := filepath.Base(c.path)
	f, tmp, err := safefs.CreateTemp(dfd, "."+name+".tmp-")
	if err != nil {
		return fail(err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fail(err)
	}
	return nil
}
