package dest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
)

// ContainerdDaemon is what a containerd config.toml says about where the
// kubelet's images go: the daemon's socket, the CRI's snapshotter and
// namespace. Each *Key names the file and key that set the value ("" when
// it is containerd's default).
type ContainerdDaemon struct {
	Address, AddressKey         string
	Snapshotter, SnapshotterKey string
	// Namespace is always the CRI's, k8s.io: containerd's CRI has no
	// setting for it (constants.K8sContainerdNamespace).
	Namespace string
}

// ctrdCRISnapshotter is where each config version keeps the CRI's
// snapshotter: version 1 (and no version) plugins.cri.containerd, 2
// plugins."io.containerd.grpc.v1.cri".containerd (containerd 2.x's
// migration moves it to the image service's table: plugins/cri/images
// migrateConfig), 3 and 4 plugins."io.containerd.cri.v1.images".
var ctrdCRISnapshotter = map[int][]string{
	0: {"cri", "containerd"},
	1: {"cri", "containerd"},
	2: {"io.containerd.grpc.v1.cri", "containerd"},
	3: {"io.containerd.cri.v1.images"},
	4: {"io.containerd.cri.v1.images"},
}

// ctrdGRPCPlugin holds the socket address in version 4 (containerd 2.4's
// serviceMigrate moves [grpc] there).
const ctrdGRPCPlugin = "io.containerd.server.v1.grpc"

// ctrdConfigMaxFiles bounds the files the imports of one config name.
const ctrdConfigMaxFiles = 256

// ReadContainerdConfig reads a containerd config.toml as containerd's
// LoadConfig does (cmd/containerd/server/config: the file, then its
// imports breadth-first, each relative to the importing file's directory
// and globbed when it holds '*', a file read once, a drop-in's version
// not above the root's) as far as the socket and the CRI's snapshotter
// go. mergeConfig replaces a plugin's table as a whole, so the last file
// with the CRI's table decides the snapshotter (its default, overlayfs,
// when that table does not set it); the address is the last one a file
// sets ([grpc] address; version 4: the grpc server plugin's table, which
// decides as a whole). A missing file means containerd's defaults; an
// import that is missing, a file that does not parse or a version above
// 4 is an error naming the file.
func ReadContainerdConfig(path string) (*ContainerdDaemon, error) {
	out := &ContainerdDaemon{Address: DefaultContainerdAddress, Snapshotter: DefaultContainerdSnapshotter, Namespace: DefaultContainerdNamespace}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	type file struct{ path, parent string }
	pending := []file{{path: path}}
	loaded := map[string]bool{}
	rootVersion := -1
	for len(pending) > 0 {
		f := pending[0]
		pending = pending[1:]
		if loaded[f.path] {
			continue
		}
		loaded[f.path] = true
		if len(loaded) > ctrdConfigMaxFiles {
			return nil, fmt.Errorf("containerd config %s: imports name more than %d files, the bound here", path, ctrdConfigMaxFiles)
		}
		data, err := safefile.ReadFile(f.path, safefile.MaxConfig)
		if err != nil {
			if f.parent != "" {
				return nil, fmt.Errorf("containerd config %s: imports %s: %s", f.parent, f.path, safefile.Reason(err))
			}
			return nil, fmt.Errorf("reading containerd config %s: %s", f.path, safefile.Reason(err))
		}
		var top struct {
			Version int      `toml:"version"`
			Imports []string `toml:"imports"`
			GRPC    struct {
				Address string `toml:"address"`
			} `toml:"grpc"`
			Plugins map[string]toml.Primitive `toml:"plugins"`
		}
		md, err := toml.Decode(string(data), &top)
		if err != nil {
			return nil, fmt.Errorf("parsing containerd config %s: %s", f.path, tomlErrNoData(err))
		}
		where, ok := ctrdCRISnapshotter[top.Version]
		if !ok {
			return nil, fmt.Errorf("containerd config %s: unsupported version %d (containerd reads versions 1 to 4)", f.path, top.Version)
		}
		if rootVersion < 0 {
			rootVersion = top.Version
		} else if top.Version > rootVersion {
			return nil, fmt.Errorf("containerd config %s: drop-in config version %d higher than root config version %d", f.path, top.Version, rootVersion)
		}
		if prim, ok := top.Plugins[where[0]]; ok {
			var t struct {
				Snapshotter string `toml:"snapshotter"`
				Containerd  struct {
					Snapshotter string `toml:"snapshotter"`
				} `toml:"containerd"`
			}
			if err := md.PrimitiveDecode(prim, &t); err != nil {
				return nil, fmt.Errorf("parsing containerd config %s: %s", f.path, tomlErrNoData(err))
			}
			s, key := t.Snapshotter, "plugins."+strconv.Quote(where[0])+".snapshotter"
			if len(where) > 1 {
				s, key = t.Containerd.Snapshotter, "plugins."+strconv.Quote(where[0])+".containerd.snapshotter"
			}
			out.Snapshotter, out.SnapshotterKey = DefaultContainerdSnapshotter, ""
			if s != "" {
				out.Snapshotter, out.SnapshotterKey = s, f.path+": "+key
			}
		}
		if top.Version >= 4 {
			if prim, ok := top.Plugins[ctrdGRPCPlugin]; ok {
				var g struct {
					Address string `toml:"address"`
				}
				if err := md.PrimitiveDecode(prim, &g); err != nil {
					return nil, fmt.Errorf("parsing containerd config %s: %s", f.path, tomlErrNoData(err))
				}
				out.Address, out.AddressKey = DefaultContainerdAddress, ""
				if g.Address != "" {
					out.Address, out.AddressKey = g.Address, f.path+": plugins."+strconv.Quote(ctrdGRPCPlugin)+".address"
				}
			}
		} else if top.GRPC.Address != "" {
			out.Address, out.AddressKey = top.GRPC.Address, f.path+": [grpc] address"
		}
		for i, p := range top.Imports {
			p = filepath.Clean(p)
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(f.path), p)
			}
			if len(pending) >= ctrdConfigMaxFiles {
				return nil, fmt.Errorf("containerd config %s: more than %d files to import", f.path, ctrdConfigMaxFiles)
			}
			if !strings.Contains(p, "*") {
				pending = append(pending, file{path: p, parent: f.path})
				continue
			}
			// A pattern is globbed by containerd as written; here one
			// with a wildcard in more than its last two path elements
			// (which could walk most of the filesystem as root) is refused.
			if wild := wildElems(p); wild > 2 || (wild > 0 && !strings.Contains(filepath.Base(p), "*") && !strings.Contains(filepath.Base(filepath.Dir(p)), "*")) {
				return nil, fmt.Errorf("containerd config %s: imports entry %d: a wildcard above the last two path elements is not followed", f.path, i+1)
			}
			matches, err := filepath.Glob(p)
			if err != nil {
				return nil, fmt.Errorf("containerd config %s: imports entry %d: an invalid pattern", f.path, i+1)
			}
			if len(pending)+len(matches) > ctrdConfigMaxFiles {
				return nil, fmt.Errorf("containerd config %s: more than %d files to import", f.path, ctrdConfigMaxFiles)
			}
			for _, m := range matches {
				pending = append(pending, file{path: m, parent: f.path})
			}
		}
	}
	return out, nil
}

// wildElems counts the path elements of p that hold a wildcard.
func wildElems(p string) int {
	n := 0
	for _, e := range strings.Split(p, "/") {
		if strings.ContainsAny(e, "*?[") {
			n++
		}
	}
	return n
}

// tomlErrNoData describes a TOML error by its line, quoting nothing of
// the file (which may hold registry credentials).
func tomlErrNoData(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("invalid TOML at line %d", pe.Position.Line)
	}
	return safefile.Redact(err.Error())
}
