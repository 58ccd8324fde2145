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
	"os"
	"path/filepath"
	"strings"
	"time"
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
	data, err := readFile(c.path)
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

// save writes the cache atomically with mode 0600 (it holds passwords).
func (c *cpCache) save() error {
	fail := func(err error) error {
		return fmt.Errorf("credential provider %q: writing cache %s: %v", c.Provider, c.path, cpPathErr(err))
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fail(err)
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(c.path)+".tmp-*")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fail(err)
	}
	return nil
}
