package hosts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage/pkg/configfile"
)

// RegistriesConfFile is one registries.conf file as it was read and
// checked: its path and its bytes.
type RegistriesConfFile struct {
	Path string
	Data []byte
}

// RegistriesConfFiles are the files containers/image reads as
// registries.conf, in its order: the main file (nil when none exists:
// containers/image's defaults), then the drop-ins and, last,
// CONTAINERS_REGISTRIES_CONF_OVERRIDE's file (containers/image merges each
// the same way).
type RegistriesConfFiles struct {
	Main    *RegistriesConfFile
	DropIns []RegistriesConfFile
}

// CheckRegistriesConf reads every file containers/image would read as
// registries.conf for sys -- the first main file that exists, the *.conf
// drop-ins of the drop-in directories (a later directory's file of the same
// name replaced by an earlier one's, as configfile.Read does) and
// CONTAINERS_REGISTRIES_CONF_OVERRIDE -- through safefile, and returns
// them: each must be a regular file (a FIFO or a device is refused at once,
// not waited on) of at most safefile.MaxConfig bytes, and a TOML syntax
// error is reported by file and line only (the decoder's message would
// quote the file, which may be a symlink to a root-only file). Symlinks are
// followed, as containers/image follows them
// (/etc/containers/registries.conf is often one). A missing file keeps
// containers/image's meaning (the defaults; a named main file must exist).
// Everything else about the files' meaning is containers/image's: the
// caller hands it these bytes (a snapshot, pipeline), never the paths
// again, which another user may have swapped for a FIFO meanwhile.
func CheckRegistriesConf(sys *types.SystemContext) (*RegistriesConfFiles, error) {
	opts := &configfile.File{
		Name: "registries", Extension: "conf", EnvironmentName: "CONTAINERS_REGISTRIES_CONF",
		RootForImplicitAbsolutePaths:    sys.RootForImplicitAbsolutePaths,
		CustomConfigFilePath:            sys.SystemRegistriesConfPath,
		CustomConfigFileDropInDirectory: sys.SystemRegistriesConfDirPath,
		UserId:                          os.Getuid(),
	}
	paths, err := configfile.GetSearchPaths(opts)
	if err != nil {
		return nil, fmt.Errorf("registries.conf: %s", safefile.Redact(err.Error()))
	}
	// configfile: a named main file (SystemRegistriesConfPath, else
	// $CONTAINERS_REGISTRIES_CONF) is the only one and must exist
	// (ignoreENOENT false); of the default search, a missing one is
	// skipped.
	named := sys.SystemRegistriesConfPath != "" || os.Getenv(opts.EnvironmentName) != ""
	var main string
	for _, f := range paths.MainFiles {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) && !named {
			continue
		}
		main = f
		break
	}
	dropIns := map[string]string{}
	for i := len(paths.DropInDirectories) - 1; i >= 0; i-- {
		dir := paths.DropInDirectories[i]
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading registries.conf drop-in directory %s: %w", dir, safefile.Cause(err))
		}
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
				dropIns[e.Name()] = filepath.Join(dir, e.Name())
			}
		}
	}
	if len(dropIns) > MaxRegistriesConfDropIns {
		return nil, fmt.Errorf("registries.conf drop-in directories %s hold %d files, more than the %d read here", strings.Join(paths.DropInDirectories, ", "), len(dropIns), MaxRegistriesConfDropIns)
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	sort.Strings(names)
	var files []string
	for _, n := range names {
		files = append(files, dropIns[n])
	}
	if paths.ExtraOverrideFile != "" {
		files = append(files, paths.ExtraOverrideFile)
	}
	out := &RegistriesConfFiles{}
	read := func(f string, mustExist bool) (*RegistriesConfFile, error) {
		data, err := readFile(f)
		if errors.Is(err, fs.ErrNotExist) && !mustExist {
			return nil, nil // containers/image skips a vanished drop-in
		}
		if err != nil {
			return nil, fmt.Errorf("reading registries.conf %s: %w", f, safefile.Cause(err))
		}
		var v map[string]any
		if _, err := toml.Decode(string(data), &v); err != nil {
			return nil, fmt.Errorf("registries.conf %s: %s", f, tomlSyntaxNoData(err))
		}
		return &RegistriesConfFile{Path: f, Data: data}, nil
	}
	if main != "" {
		// A named main file must exist (containers/image's rule); the
		// first one found by the search may not have vanished either.
		if out.Main, err = read(main, true); err != nil {
			return nil, err
		}
	}
	for i, f := range files {
		override := paths.ExtraOverrideFile != "" && i == len(files)-1
		rf, err := read(f, override) // containers/image requires the override file
		if err != nil {
			return nil, err
		}
		if rf != nil {
			out.DropIns = append(out.DropIns, *rf)
		}
	}
	return out, nil
}

// MaxRegistriesConfDropIns bounds the registries.conf drop-ins read.
const MaxRegistriesConfDropIns = 256

// tomlSyntaxNoData is a TOML syntax error by line and kind: quoted
// fragments of the decoder's message and its last key are left out.
func tomlSyntaxNoData(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("invalid TOML at line %d: %s", pe.Position.Line, safefile.Redact(pe.Message))
	}
	return "invalid TOML: " + safefile.Redact(err.Error())
}

// RegistriesConfError is err from containers/image's registries.conf
// loader without the fragments of the file its message may quote.
func RegistriesConfError(err error) string { return safefile.Redact(err.Error()) }
