package auth

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

// CheckRegistriesConf reads every file containers/image would read as
// registries.conf for sys -- the first main file that exists, the *.conf
// drop-ins of the drop-in directories (a later directory's file of the same
// name replaced by an earlier one's, as configfile.Read does) and
// CONTAINERS_REGISTRIES_CONF_OVERRIDE -- through safefile, before
// containers/image opens them: each must be a regular file (a FIFO or a
// device is refused at once, not waited on) of at most safefile.MaxConfig
// bytes, and a TOML syntax error is reported by file and line only (the
// decoder's message would quote the file, which may be a symlink to a
// root-only file). Symlinks are followed, as containers/image follows them
// (/etc/containers/registries.conf is often one). A missing file keeps
// containers/image's meaning (the defaults); everything else about the
// files' meaning is containers/image's, which reads them next.
func CheckRegistriesConf(sys *types.SystemContext) error {
	opts := &configfile.File{
		Name: "registries", Extension: "conf", EnvironmentName: "CONTAINERS_REGISTRIES_CONF",
		RootForImplicitAbsolutePaths:    sys.RootForImplicitAbsolutePaths,
		CustomConfigFilePath:            sys.SystemRegistriesConfPath,
		CustomConfigFileDropInDirectory: sys.SystemRegistriesConfDirPath,
		UserId:                          os.Getuid(),
	}
	paths, err := configfile.GetSearchPaths(opts)
	if err != nil {
		return fmt.Errorf("registries.conf: %s", safefile.Redact(err.Error()))
	}
	var files []string
	for _, f := range paths.MainFiles {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		files = append(files, f)
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
			return fmt.Errorf("reading registries.conf drop-in directory %s: %w", dir, pathErr(err))
		}
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
				dropIns[e.Name()] = filepath.Join(dir, e.Name())
			}
		}
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, dropIns[n])
	}
	if paths.ExtraOverrideFile != "" {
		files = append(files, paths.ExtraOverrideFile)
	}
	for _, f := range files {
		data, err := readFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // containers/image skips a vanished drop-in; a vanished main file means its defaults
		}
		if err != nil {
			return fmt.Errorf("reading registries.conf %s: %w", f, pathErr(err))
		}
		var v map[string]any
		if _, err := toml.Decode(string(data), &v); err != nil {
			return fmt.Errorf("registries.conf %s: %s", f, tomlSyntaxNoData(err))
		}
	}
	return nil
}

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
