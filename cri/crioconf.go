package cri

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefile"
)

// CRI-O's own configuration files (pkg/config: CrioConfigPath,
// CrioConfigDropInPath).
const (
	CRIOConfigDefault    = "/etc/crio/crio.conf"
	CRIOConfigDirDefault = "/etc/crio/crio.conf.d"
)

// maxCRIODropIns bounds the entries of the drop-in directory walked
// (files and directories).
const maxCRIODropIns = 256

// CRIODefaultSignaturePolicyDir is CRI-O's signature_policy_dir default
// (pkg/config: DefaultSignaturePolicyDir).
const CRIODefaultSignaturePolicyDir = "/etc/crio/policies"

// CRIOSettings is what pullhelper takes of CRI-O's configuration: the store
// (the [crio] table's root, runroot, imagestore, storage_driver and
// storage_option), the signature policies ([crio.image]
// signature_policy, the node's, "" for containers/image's default; and
// signature_policy_dir, where NAMESPACE.json is a pod namespace's own) and
// the node's credential file ([crio.image] global_auth_file, "" for
// containers/image's default search).
type CRIOSettings struct {
	Root, RunRoot, ImageStore, Driver string
	Options                           []string
	SignaturePolicy                   string
	SignaturePolicyDir                string
	GlobalAuthFile                    string
	// Files are the files read, in the order they were applied.
	Files []string
}

// CRIOConfig names CRI-O's configuration as its command line does
// (--config, --config-dir).
type CRIOConfig struct {
	// File is crio.conf; FileSet says it was named explicitly (a
	// missing file is then an error, as CRI-O's mergeConfigFiles fails
	// on an explicit --config; the default's absence is skipped).
	File    string
	FileSet bool
	// Dir is the drop-in directory ("" : none); a missing one is
	// skipped (UpdateFromPath).
	Dir string
}

// crioTOML is the part of CRI-O's tomlConfig read here: the [crio] table's
// storage keys (RootConfig) and [crio.image]'s signature policies and
// global auth file (ImageConfig). Other keys and tables are not decoded, as CRI-O ignores
// keys it does not know.
type crioTOML struct {
	Crio struct {
		Root           string   `toml:"root"`
		RunRoot        string   `toml:"runroot"`
		ImageStore     string   `toml:"imagestore"`
		Storage        string   `toml:"storage_driver"`
		StorageOptions []string `toml:"storage_option"`
		Image          struct {
			SignaturePolicy    string `toml:"signature_policy"`
			SignaturePolicyDir string `toml:"signature_policy_dir"`
			GlobalAuthFile     string `toml:"global_auth_file"`
		} `toml:"image"`
	} `toml:"crio"`
}

// LoadCRIOSettings applies CRI-O's configuration to base, the store of
// storage.conf (CRI-O's DefaultConfig starts from
// storage.DefaultStoreOptions), exactly as CRI-O loads it: crio.conf
// (Config.UpdateFromFile), then every file below the drop-in directory in
// lexical order, recursively (UpdateFromPath: filepath.Walk), each through
// UpdateFromDropInFile: a key a file sets replaces the value so far, an
// empty root, runroot or storage_driver keeps it, and storage_option is
// appended to the options so far with duplicates removed, the last of each
// kept (removeDupStorageOpts). A file that is not valid TOML, or whose
// keys have the wrong type, fails as CRI-O's loader fails ("unable to
// decode configuration"): CRI-O would not start with it. Each file is read
// as root reads a caller's file (safefile: a regular file, bounded), and
// no error repeats its content.
func LoadCRIOSettings(base CRIOSettings, c CRIOConfig) (CRIOSettings, error) {
	cur := base
	cur.Options = slices.Clone(base.Options)
	cur.Files = nil
	if cur.SignaturePolicyDir == "" {
		cur.SignaturePolicyDir = CRIODefaultSignaturePolicyDir
	}
	if c.File != "" {
		if err := cur.update(c.File, "--crio-config"); err != nil {
			if !c.FileSet && errors.Is(err, fs.ErrNotExist) {
				// CRI-O: "Skipping not-existing config file".
			} else {
				return CRIOSettings{}, err
			}
		}
	}
	if c.Dir == "" {
		return cur, cur.checkPolicies()
	}
	// UpdateFromPath: os.Stat, a path that does not exist (a dangling
	// link too) is skipped.
	if _, err := os.Stat(c.Dir); errors.Is(err, fs.ErrNotExist) {
		return cur, cur.checkPolicies()
	}
	n := 0
	err := filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return failure.New(failure.Usage, "CRI-O drop-in directory %s (--crio-config-dir): %s", c.Dir, failure.Reason(err))
		}
		if n++; n > maxCRIODropIns {
			return failure.New(failure.Usage, "CRI-O drop-in directory %s (--crio-config-dir): more than %d entries", c.Dir, maxCRIODropIns)
		}
		if d.IsDir() {
			return nil
		}
		return cur.update(p, "--crio-config-dir")
	})
	if err != nil {
		return CRIOSettings{}, err
	}
	return cur, cur.checkPolicies()
}

// checkPolicies refuses what CRI-O's ImageConfig.Validate refuses: a
// signature_policy_dir that is not an absolute path.
func (s CRIOSettings) checkPolicies() error {
	if !filepath.IsAbs(s.SignaturePolicyDir) {
		where := "CRI-O's configuration"
		if len(s.Files) > 0 {
			where = strings.Join(s.Files, ", ")
		}
		return failure.New(failure.Usage, "signature_policy_dir %q (%s): must be an absolute path, as CRI-O requires", clip(s.SignaturePolicyDir, 256), where)
	}
	return nil
}

// update is CRI-O's Config.UpdateFromDropInFile for the keys read here: a
// key a file sets replaces the value so far (the signature policies too,
// an empty one included).
func (s *CRIOSettings) update(path, flag string) error {
	data, err := safefile.ReadFile(path, safefile.MaxConfig)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return failure.Wrap(failure.Usage, fs.ErrNotExist, "CRI-O configuration %s (%s)", path, flag)
		}
		return failure.New(failure.Usage, "CRI-O configuration %s (%s) is not a readable file: %s", path, flag, safefile.Reason(err))
	}
	prevOpts := slices.Clone(s.Options)
	var t crioTOML
	t.Crio.Root, t.Crio.RunRoot, t.Crio.ImageStore, t.Crio.Storage = s.Root, s.RunRoot, s.ImageStore, s.Driver
	t.Crio.StorageOptions = slices.Clone(s.Options)
	t.Crio.Image.SignaturePolicy, t.Crio.Image.SignaturePolicyDir = s.SignaturePolicy, s.SignaturePolicyDir
	t.Crio.Image.GlobalAuthFile = s.GlobalAuthFile
	if _, err := toml.Decode(string(data), &t); err != nil {
		return failure.New(failure.Usage, "CRI-O configuration %s (%s): unable to decode it, as CRI-O's loader fails on it (CRI-O would not start): %s",
			path, flag, safefile.Redact(err.Error()))
	}
	opts := removeDupStorageOpts(append(prevOpts, t.Crio.StorageOptions...))
	if t.Crio.Root == "" {
		t.Crio.Root = s.Root
	}
	if t.Crio.RunRoot == "" {
		t.Crio.RunRoot = s.RunRoot
	}
	if t.Crio.Storage == "" {
		t.Crio.Storage = s.Driver
	}
	s.Root, s.RunRoot, s.ImageStore, s.Driver, s.Options = t.Crio.Root, t.Crio.RunRoot, t.Crio.ImageStore, t.Crio.Storage, opts
	s.SignaturePolicy, s.SignaturePolicyDir = t.Crio.Image.SignaturePolicy, t.Crio.Image.SignaturePolicyDir
	s.GlobalAuthFile = t.Crio.Image.GlobalAuthFile
	s.Files = append(s.Files, path)
	return nil
}

// removeDupStorageOpts is CRI-O's: duplicates removed, the last of each
// kept, in order.
func removeDupStorageOpts(opts []string) []string {
	seen := map[string]bool{}
	var rev []string
	for _, o := range slices.Backward(opts) {
		if seen[o] {
			continue
		}
		seen[o] = true
		rev = append(rev, o)
	}
	slices.Reverse(rev)
	return rev
}

// StoreSpec is the containers-storage: store specifier naming s
// ([DRIVER@GRAPHROOT+RUNROOT[:OPTIONS]]), given the store storage.conf
// names (base): the options are spelled only when they differ from
// storage.conf's (the DEST's options replace storage.conf's). What the
// specifier cannot spell is refused, naming the key: an imagestore other
// than storage.conf's, a root holding one of @+:], an option holding a
// comma or ]. The roots are checked again, as every store root is, by the
// containers-storage: DEST before anything is created there.
func (s CRIOSettings) StoreSpec(base CRIOSettings) (string, error) {
	where := "CRI-O's configuration"
	if len(s.Files) > 0 {
		where = strings.Join(s.Files, ", ")
	}
	if s.ImageStore != base.ImageStore {
		return "", failure.New(failure.Usage, "imagestore in %s: a containers-storage: DEST takes the image store from storage.conf only; set it there", where)
	}
	for _, p := range []struct{ key, v string }{{"root", s.Root}, {"runroot", s.RunRoot}} {
		if p.v == "" || !filepath.IsAbs(p.v) {
			return "", failure.New(failure.Usage, "%s %q (%s): must be an absolute path", p.key, p.v, where)
		}
		if strings.ContainsAny(p.v, "@+:]") {
			return "", failure.New(failure.Usage, "%s %q (%s): a containers-storage: store specifier cannot name a path holding @, +, : or ]; move the store", p.key, p.v, where)
		}
	}
	if strings.ContainsAny(s.Driver, "@+:],[") {
		return "", failure.New(failure.Usage, "storage_driver (%s): not a driver name", where)
	}
	out := "["
	if s.Driver != "" {
		out += s.Driver + "@"
	}
	out += s.Root + "+" + s.RunRoot
	if !slices.Equal(s.Options, base.Options) && len(s.Options) > 0 {
		for i, o := range s.Options {
			if o == "" || strings.ContainsAny(o, ",]") {
				return "", failure.New(failure.Usage, "storage_option %d of %d (%s, storage.conf's first): a containers-storage: store specifier cannot spell an empty option or one holding a comma or ]; set it in storage.conf", i+1, len(s.Options), where)
			}
		}
		out += ":" + strings.Join(s.Options, ",")
	}
	return out + "]", nil
}
