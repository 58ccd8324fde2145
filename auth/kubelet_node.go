package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/pullhelper/pullhelper/internal/safefile"
)

// The node's docker config search (kubernetes pkg/credentialprovider
// config.go ReadDockerConfigFile).

// NodeConfigDirs are the directories the kubelet searches for the node's
// docker config: RootDir is --root-dir (default /var/lib/kubelet), Cwd the
// kubelet's working directory, Home its home directory, Slash the file
// system root ("/" when empty; tests substitute their own). Empty RootDir,
// Cwd or Home behave as in the kubelet, where filepath.Abs resolves them
// against the process's working directory.
type NodeConfigDirs struct {
	RootDir, Cwd, Home, Slash string
	// Warn, when set, gets each file that exists but is skipped because it
	// cannot be read or does not parse (the kubelet logs it: "while trying
	// to read").
	Warn func(string)
}

// LoadNodeDockerConfig searches like the kubelet's ReadDockerConfigFile:
// config.json in RootDir, Cwd, Home/.docker, Slash/.docker, the first file
// that reads and parses wins (missing, unreadable or invalid files, including
// a bad "auth" field, are skipped; each one that exists is a warning to
// dirs.Warn, as the kubelet logs it); a config.json without "auths" yields
// an empty keyring and ends the search. Only if no config.json parsed,
// .dockercfg in RootDir, Cwd, Home, Slash. It returns the keyring and the file used (""
// if none). As in the kubelet, nothing here is an error: the error is always
// nil and exists for callers' uniformity.
func LoadNodeDockerConfig(dirs NodeConfigDirs) (*KubeletKeyring, string, error) {
	slash := dirs.Slash
	if slash == "" {
		slash = "/"
	}
	jsonDirs := []string{dirs.RootDir, dirs.Cwd, filepath.Join(dirs.Home, ".docker"), filepath.Join(slash, ".docker")}
	if cfg, file, ok := searchNodeConfig(jsonDirs, "config.json", parseKubeletConfigJSON, dirs.Warn); ok {
		k := &KubeletKeyring{}
		k.add(cfg, sourceKubeletNodeConfig, file)
		return k, file, nil
	}
	cfgDirs := []string{dirs.RootDir, dirs.Cwd, dirs.Home, slash}
	if cfg, file, ok := searchNodeConfig(cfgDirs, ".dockercfg", parseKubeletDockercfg, dirs.Warn); ok {
		k := &KubeletKeyring{}
		k.add(cfg, sourceKubeletNodeConfig, file)
		return k, file, nil
	}
	return &KubeletKeyring{}, "", nil
}

func searchNodeConfig(dirs []string, name string, parse func([]byte) (kubeletConfig, error), warn func(string)) (kubeletConfig, string, bool) {
	skipped := func(msg string) {
		if warn != nil {
			warn(msg + "; skipped, as the kubelet skips it (ReadDockerConfigFile)")
		}
	}
	for _, d := range dirs {
		p, err := filepath.Abs(filepath.Join(d, name))
		if err != nil {
			continue
		}
		data, err := readFile(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				skipped(fmt.Sprintf("reading the node docker config %s: %v", p, safefile.Cause(err)))
			}
			continue
		}
		cfg, err := parse(data)
		if err != nil {
			skipped(configError(p, err).Error())
			continue
		}
		return cfg, p, true
	}
	return kubeletConfig{}, "", false
}
