package dest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/memfs"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.podman.io/image/v5/docker/reference"
	storagetypes "go.podman.io/storage/types"
)

// A containers-storage: DEST's parsing: the [STORE]REF form and the
// storage.conf defaults it leaves out, read from a checked snapshot.

// storageDrivers are the graph drivers of the pure-Go build that a pull
// may name (btrfs and devicemapper are compiled out).
var storageDrivers = map[string]bool{"vfs": true, "overlay": true}

const storageForm = "use containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME[:TAG|@DIGEST]"

// confEnvMu serialises the CONTAINERS_STORAGE_CONF overrides of
// loadStoreOptions: the one process-wide environment change left in dest.
// go.podman.io/storage (v1.65) takes a named storage.conf's path, and the
// override file's, from nowhere but $CONTAINERS_STORAGE_CONF and
// $CONTAINERS_STORAGE_CONF_OVERRIDE: LoadStoreOptions' LoadOptions has
// only an alternative root for the system's paths (which the search
// uses: storageconf_search.go), which those variables still override (so
// a caller's variable would win over the checked snapshot), and
// DefaultStoreOptions, which GetStore reads and caches for the process,
// takes no options at all. So the variables point at the snapshot only
// for those reads, at Parse, and are put back at once; loadStoreOptions
// holds this lock from its first read of them to the last, and nothing
// else reads them (a process started meanwhile, a credential plugin of
// another pull in `pullhelper cri`, inherits them: paths of this
// process's descriptor table, meaningless in its own).
var confEnvMu sync.Mutex

// parseStorage splits [DRIVER@GRAPHROOT+RUNROOT:OPTIONS]REF (the store
// specifier optional, each of its parts but GRAPHROOT optional) and fills
// what it leaves out from storage.conf, returned whole (the store's
// settings, the parent's only). Errors name the part to fix.
func parseStorage(raw, rest string, o ParseOptions) (Spec, *storagetypes.StoreOptions, error) {
	var driver, root, run string
	var opts []string
	ref := rest
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Spec{}, nil, fmt.Errorf("the store specifier has no closing ]; %s", storageForm)
		}
		spec := rest[1:end]
		ref = rest[end+1:]
		if d, r, ok := strings.Cut(spec, "@"); ok {
			if d == "" {
				return Spec{}, nil, fmt.Errorf("the driver before @ is empty; %s", storageForm)
			}
			driver, spec = d, r
		}
		if r, o, ok := strings.Cut(spec, ":"); ok {
			spec = r
			for _, x := range strings.Split(o, ",") {
				if x == "" {
					return Spec{}, nil, fmt.Errorf("an empty driver option after :; %s", storageForm)
				}
				opts = append(opts, x)
			}
		}
		root, run, _ = strings.Cut(spec, "+")
		if root == "" {
			return Spec{}, nil, fmt.Errorf("the graph root is empty; %s", storageForm)
		}
		for _, p := range []string{root, run} {
			if p != "" && !filepath.IsAbs(p) {
				return Spec{}, nil, fmt.Errorf("%q is not an absolute path; %s", p, storageForm)
			}
		}
	}
	if driver != "" && !storageDrivers[driver] {
		return Spec{}, nil, fmt.Errorf("graph driver %q is not supported; use vfs or overlay", driver)
	}
	if ref == "" {
		return Spec{}, nil, fmt.Errorf("the image name is empty; %s", storageForm)
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return Spec{}, nil, fmt.Errorf("image name %q: %v; %s", ref, err, storageForm)
	}
	if named, err = storageName(named); err != nil {
		return Spec{}, nil, fmt.Errorf("image name %q: %v; %s", ref, err, storageForm)
	}
	so, err := loadStoreOptions(o.StorageConf)
	if err != nil {
		return Spec{}, nil, err
	}
	if root != "" {
		so.GraphRoot = filepath.Clean(root)
	}
	if run != "" {
		so.RunRoot = filepath.Clean(run)
	}
	if driver != "" {
		so.GraphDriverName = driver
	}
	if opts != nil {
		so.GraphDriverOptions = opts
	}
	if so.GraphRoot == "" || so.GraphRoot == "/" || !filepath.IsAbs(so.GraphRoot) {
		return Spec{}, nil, fmt.Errorf("graph root %q: must be an absolute path other than /", so.GraphRoot)
	}
	if so.RunRoot == "" || !filepath.IsAbs(so.RunRoot) {
		return Spec{}, nil, fmt.Errorf("run root %q: must be an absolute path", so.RunRoot)
	}
	if so.GraphDriverName != "" && !storageDrivers[so.GraphDriverName] {
		return Spec{}, nil, fmt.Errorf("graph driver %q (from storage.conf) is not supported; use vfs or overlay", so.GraphDriverName)
	}
	ss := &StoreSpec{Driver: so.GraphDriverName, GraphRoot: so.GraphRoot, RunRoot: so.RunRoot,
		DriverOptions: so.GraphDriverOptions, Conf: o.StorageConf}
	// Path is where staging goes (see storageImportDir): pull locks, gc
	// and the IO accounting key on it.
	return Spec{Raw: raw, Transport: "containers-storage", Path: filepath.Join(so.GraphRoot, storageImportDir), Ref: named.String(), Store: ss}, &so, nil
}

// loadStoreOptions reads storage.conf: conf when set (it must exist),
// else the file $CONTAINERS_STORAGE_CONF names (as c/storage: it must
// exist, and no drop-in is read), else the system's search
// (searchedStoreOptions). It holds confEnvMu throughout: the variables
// it reads are the ones another load points at its snapshot.
func loadStoreOptions(conf string) (storagetypes.StoreOptions, error) {
	confEnvMu.Lock()
	defer confEnvMu.Unlock()
	switch env := os.Getenv(storageConfEnv); {
	case conf != "":
		return namedStoreOptions(conf, "dest.storage_conf")
	case env != "":
		return namedStoreOptions(env, storageConfEnv)
	case os.Geteuid() != 0:
		// Without root there is nothing to protect (storageConfSnapshot).
		so, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{})
		if err != nil {
			return so, fmt.Errorf("reading storage.conf: %v", err)
		}
		return so, nil
	}
	return searchedStoreOptions("")
}

// storageConfEnv names the storage.conf that replaces c/storage's search;
// with _OVERRIDE appended, a file read over whatever was found.
const storageConfEnv = "CONTAINERS_STORAGE_CONF"

// namedStoreOptions reads the storage.conf at conf, which what names
// (dest.storage_conf or $CONTAINERS_STORAGE_CONF); confEnvMu is held.
func namedStoreOptions(conf, what string) (storagetypes.StoreOptions, error) {
	// A caller-named file: a regular one, bounded (safefile), whose bytes
	// c/storage then reads from a private snapshot (storageConfSnapshot),
	// never from the caller's path again; c/storage's messages lose quoted
	// fragments.
	data, err := safefile.ReadFile(conf, safefile.MaxConfig)
	if err != nil {
		return storagetypes.StoreOptions{}, fmt.Errorf("storage.conf %s (%s) is not a readable file: %s", conf, what, safefile.Reason(err))
	}
	override := os.Getenv("CONTAINERS_STORAGE_CONF_OVERRIDE")
	var overrideData []byte
	if override != "" {
		if overrideData, err = safefile.ReadFile(override, safefile.MaxConfig); err != nil {
			return storagetypes.StoreOptions{}, fmt.Errorf("storage.conf override %s (CONTAINERS_STORAGE_CONF_OVERRIDE) is not a readable file: %s", override, safefile.Reason(err))
		}
	}
	if checkedHook != nil {
		checkedHook(conf)
	}
	snap, confPath, overridePath, err := storageConfSnapshot(conf, data, override, overrideData)
	if err != nil {
		return storagetypes.StoreOptions{}, err
	}
	defer snap.Close()
	restore := setEnv(map[string]string{"CONTAINERS_STORAGE_CONF": confPath, "CONTAINERS_STORAGE_CONF_OVERRIDE": overridePath})
	defer restore()
	so, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{})
	if err != nil {
		return so, fmt.Errorf("reading storage.conf %s (%s): %s", conf, what, safefile.Redact(err.Error()))
	}
	// storage.GetStore reads storage.conf once more, for its defaults
	// (DefaultStoreOptions, cached for the process): let that read be the
	// snapshot's too.
	_, _ = storagetypes.DefaultStoreOptions()
	return so, nil
}

// checkedHook, when set (the test build), is told of storage.conf once it
// was checked, before c/storage reads it.
var checkedHook func(path string)

// storageConfSnapshot writes storage.conf's checked bytes (and the
// override file's, if any) into a private in-memory filesystem
// (internal/memfs: mounted nowhere, gone when closed) and returns the paths
// c/storage is pointed at. Without root there is nothing to protect and no
// such filesystem: the caller's paths are returned.
func storageConfSnapshot(conf string, data []byte, override string, overrideData []byte) (*memfs.FS, string, string, error) {
	if os.Geteuid() != 0 {
		return nil, conf, override, nil
	}
	fs, err := memfs.New(2*safefile.MaxConfig+(1<<20), 16)
	if err != nil {
		return nil, "", "", failure.New(failure.Isolation, "the checked storage.conf %s is kept in a private in-memory filesystem and one could not be created (%v); run pullhelper as root", conf, err)
	}
	confPath, err := fs.WriteFile("storage.conf", data)
	if err == nil && override != "" {
		override, err = fs.WriteFile("storage-override.conf", overrideData)
	}
	if err != nil {
		fs.Close()
		return nil, "", "", failure.New(failure.Internal, "keeping a copy of storage.conf %s: %v", conf, failure.Reason(err))
	}
	return fs, confPath, override, nil
}

// setEnv sets (or, for "", unsets) each variable and returns what puts
// the old values back; confEnvMu must be held until then.
func setEnv(vars map[string]string) (restore func()) {
	type old struct {
		v   string
		had bool
	}
	olds := map[string]old{}
	for k, v := range vars {
		o, had := os.LookupEnv(k)
		olds[k] = old{o, had}
		if v == "" {
			os.Unsetenv(k)
		} else {
			os.Setenv(k, v)
		}
	}
	return func() {
		for k, o := range olds {
			if o.had {
				os.Setenv(k, o.v)
			} else {
				os.Unsetenv(k)
			}
		}
	}
}

// storageName is the name a containers-storage: DEST's image gets: a
// tag (":latest" when none is named), or REPO@sha256:DIGEST for a
// digest, as CRI-O's PullImage stores a pull by digest (its destination
// is containers/image's storage reference of the pulled name, whose
// storageImageDestination.CommitWithOptions adds that name, no tag). A
// tag beside the digest is dropped: the digest names the image (as
// containerd's CRI and the kubelet read NAME:TAG@DIGEST).
func storageName(named reference.Named) (reference.Named, error) {
	d, ok := named.(reference.Digested)
	if !ok {
		return reference.TagNameOnly(named), nil
	}
	if d.Digest().Algorithm() != digest.SHA256 {
		return nil, fmt.Errorf("digest %s: only sha256 digests are supported", d.Digest())
	}
	return reference.WithDigest(reference.TrimNamed(named), d.Digest())
}

// RefDigest is the digest a containers-storage: or containerd: DEST's name
// carries (REPO@sha256:DIGEST), "" for a tag or another transport.
func RefDigest(s Spec) string {
	if s.Transport != "containers-storage" && s.Transport != "containerd" {
		return ""
	}
	named, err := reference.ParseNormalizedNamed(s.Ref)
	if err != nil {
		return ""
	}
	if d, ok := named.(reference.Digested); ok {
		return d.Digest().String()
	}
	return ""
}
