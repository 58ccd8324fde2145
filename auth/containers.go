package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/storage/pkg/homedir"
)

// Env is the part of the environment the default search depends on. Tests
// substitute their own; FromOS reads the process's.
type Env struct {
	UID  int
	Home string
	// HomeEnv is $HOME itself ("" when unset), which the kubelet's node
	// docker config search uses (os.UserHomeDir), unlike Home.
	HomeEnv        string
	XDGRuntimeDir  string
	XDGConfigHome  string
	DockerConfig   string
	RegistryAuthFn string // REGISTRY_AUTH_FILE
}

// OSEnv returns the process's Env. The home directory is containers/image's
// (homedir.Get: $HOME, else the passwd entry's: services often run without
// HOME).
func OSEnv() Env {
	home := homedir.Get()
	return Env{
		UID:            os.Getuid(),
		Home:           home,
		HomeEnv:        os.Getenv("HOME"),
		XDGRuntimeDir:  os.Getenv("XDG_RUNTIME_DIR"),
		XDGConfigHome:  os.Getenv("XDG_CONFIG_HOME"),
		DockerConfig:   os.Getenv("DOCKER_CONFIG"),
		RegistryAuthFn: os.Getenv("REGISTRY_AUTH_FILE"),
	}
}

// ContainersAuthFiles returns the files containers/image would read, in
// order. An explicit file (--authfile, else REGISTRY_AUTH_FILE) is the only
// one read; otherwise the primary runtime file is followed by the user's
// containers, Docker and legacy files.
func ContainersAuthFiles(explicit string, env Env) (files []wire.AuthFile, userSpecified bool, warnings []string) {
	if explicit == "" {
		explicit = env.RegistryAuthFn
	}
	if explicit != "" {
		return []wire.AuthFile{{Path: explicit}}, true, nil
	}
	primary := fmt.Sprintf("/run/containers/%d/auth.json", env.UID)
	if env.XDGRuntimeDir != "" {
		// getPathToAuthWithOS: a missing XDG_RUNTIME_DIR is a warning
		// and no runtime file (getAuthFilePaths goes on); anything else
		// is used, so that one that is not a directory fails the lookup
		// as reading the file below it fails.
		if _, err := os.Stat(env.XDGRuntimeDir); errors.Is(err, fs.ErrNotExist) {
			primary = ""
			warnings = append(warnings, fmt.Sprintf("XDG_RUNTIME_DIR %q does not exist; skipping the runtime auth file", env.XDGRuntimeDir))
		} else {
			primary = filepath.Join(env.XDGRuntimeDir, "containers/auth.json")
		}
	}
	if primary != "" {
		files = append(files, wire.AuthFile{Path: primary})
	}
	cfg := env.XDGConfigHome
	if cfg == "" && env.Home != "" {
		cfg = filepath.Join(env.Home, ".config")
	}
	if cfg != "" {
		files = append(files, wire.AuthFile{Path: filepath.Join(cfg, "containers/auth.json")})
	}
	if env.DockerConfig != "" {
		files = append(files, wire.AuthFile{Path: filepath.Join(env.DockerConfig, "config.json")})
	} else if env.Home != "" {
		files = append(files, wire.AuthFile{Path: filepath.Join(env.Home, ".docker/config.json")})
	}
	if env.Home != "" {
		files = append(files, wire.AuthFile{Path: filepath.Join(env.Home, ".dockercfg"), Legacy: true})
	}
	return files, false, warnings
}

type authEntry struct {
	Auth          string `json:"auth"`
	IdentityToken string `json:"identitytoken"`
}

type authFileContent struct {
	Auths       map[string]authEntry `json:"auths"`
	CredHelpers map[string]string    `json:"credHelpers"`
}

// LookupContainers returns the credential containers/image would use for the
// repository name (e.g. "quay.io/org/repo"), or nil for anonymous. It walks
// files in order; the first non-empty result wins. An error fails the
// lookup, as containers/image's getCredentialsFromAuthFiles fails it: a file
// that cannot be read or does not parse (readJSONFile, parse), an "auth"
// field that is not padded base64 (decodeDockerAuth), a failing credHelpers
// helper.
func LookupContainers(files []wire.AuthFile, name string) (*wire.Credential, error) {
	return lookupContainers(files, name, lookupOpts{})
}

// lookupOpts: Warn (nil: none) gets what containers/image only warns about
// (an "auth" field without a colon, which it skips); with Explain a
// credHelpers entry is not run: a placeholder says it would be.
type lookupOpts struct {
	Warn    func(string)
	Explain bool
}

func (o lookupOpts) warn(msg string) {
	if o.Warn != nil {
		o.Warn(msg)
	}
}

// lookupContainers is LookupContainers with o.
func lookupContainers(files []wire.AuthFile, name string, o lookupOpts) (*wire.Credential, error) {
	registry := strings.SplitN(name, "/", 2)[0]
	for _, f := range files {
		c, err := lookupFile(f, name, registry, o)
		if err != nil {
			return nil, err
		}
		if c != nil {
			return c, nil
		}
	}
	return nil, nil
}

func lookupFile(f wire.AuthFile, name, registry string, o lookupOpts) (*wire.Credential, error) {
	data, err := f.Data, error(nil)
	if data == nil {
		data, err = readFile(f.Path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading auth file %s: %w", f.Path, safefile.Cause(err))
	}
	var content authFileContent
	if f.Legacy {
		err = json.Unmarshal(data, &content.Auths)
	} else {
		err = json.Unmarshal(data, &content)
	}
	if err != nil {
		return nil, fmt.Errorf("auth file %s does not parse: %s", f.Path, jsonErrorNoData(err))
	}
	if h, ok := content.CredHelpers[registry]; ok && !f.Legacy {
		if o.Explain {
			if _, err := helperBinary(h, registry, f.Path, "credHelpers."+registry); err != nil {
				return nil, err
			}
			return &wire.Credential{Source: "credential-helper", File: f.Path,
				Key: "credHelpers." + registry + ": docker-credential-" + h + " get " + registry + " (run at pull time; not run by explain)"}, nil
		}
		return runCredHelper(h, registry, f.Path)
	}
	var keys []string
	if f.Legacy {
		keys = []string{registry}
	} else {
		for k := name; ; {
			keys = append(keys, k)
			i := strings.LastIndex(k, "/")
			if i < 0 {
				break
			}
			k = k[:i]
		}
	}
	for _, k := range keys {
		if e, ok := content.Auths[k]; ok {
			return decodeEntry(e, f, k, o)
		}
	}
	want := normalizeRegistry(registry)
	for k, e := range content.Auths {
		if normalizeAuthKey(k, f.Legacy) == want {
			return decodeEntry(e, f, k, o)
		}
	}
	return nil, nil
}

// decodeEntry is containers/image's decodeDockerAuth: "auth" is standard
// (padded) base64 of "user:password"; a decode error fails the lookup; no
// colon is no credential (the next file is searched), with a warning unless
// the field is empty (Docker's marker of a credential helper); and so is an
// entry with no user, no password and no identity token (":"), which
// getCredentialsFromAuthFiles passes over like no entry.
func decodeEntry(e authEntry, f wire.AuthFile, key string, o lookupOpts) (*wire.Credential, error) {
	file, where := f.Path, fmt.Sprintf("auths.%q.auth", key)
	if f.Legacy {
		where = fmt.Sprintf("%q.auth", key)
	}
	if e.Auth == "" {
		return nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(e.Auth)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %s is not valid base64 (padding is required)", file, where)
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		if len(raw) > 0 {
			o.warn(fmt.Sprintf("auth file %s: %s decodes to no user:password (no colon); skipped, as containers/image skips it", file, where))
		}
		return nil, nil
	}
	pass = strings.Trim(pass, "\x00")
	if user == "" && pass == "" && e.IdentityToken == "" {
		return nil, nil
	}
	return &wire.Credential{
		Source: "containers-auth.json", File: file, Key: key,
		Username: user, Password: pass, IdentityToken: e.IdentityToken,
	}, nil
}

func normalizeAuthKey(k string, legacy bool) string {
	stripped := strings.TrimPrefix(strings.TrimPrefix(k, "http://"), "https://")
	if stripped != k || legacy {
		stripped = strings.SplitN(stripped, "/", 2)[0]
	}
	return normalizeRegistry(stripped)
}

func normalizeRegistry(r string) string {
	switch r {
	case "registry-1.docker.io", "docker.io":
		return "index.docker.io"
	}
	return r
}

// runCredHelper runs docker-credential-NAME get, passing the registry on
// stdin, as containers/image does. The helper's output is never logged.
func runCredHelper(helper, registry, file string) (*wire.Credential, error) {
	return runHelper(helper, registry, "credential-helper", file, "credHelpers."+registry)
}

// runHelper is pkg/docker/config getCredsFromCredHelper over
// docker-credential-helpers' client.Get: a helper that fails with exactly
// "credentials not found in native keychain" on stdout is no credential
// (IsErrCredentialsNotFoundMessage), any other failure an error; its answer
// is the first JSON value on stdout (json.Decoder); a "<token>" username is
// an identity token. Unlike
// the owner's, a run is bounded (the root parent runs it): helperTimeout,
// then the helper's process group is killed; helperMaxStdout of answer
// (more fails the lookup) and helperMaxStderr of messages are read. A
// helper name that is not a plain name (a "/" in it, from a caller's file)
// is refused rather than run as a path.
func runHelper(helper, registry, source, file, key string) (*wire.Credential, error) {
	bin, err := helperBinary(helper, registry, file, key)
	if err != nil {
		return nil, err
	}
	// Too much output ends the run at once (the helper would otherwise
	// block on a full pipe until the timeout).
	res, err := runBounded(bin, []string{"get"}, strings.NewReader(registry), nil,
		runBounds{Timeout: helperTimeout, MaxStdout: helperMaxStdout, MaxStderr: helperMaxStderr, KillOnOverflow: true})
	if err != nil {
		if res.Overflow {
			return nil, fmt.Errorf("credential helper %s for %s (%s in %s) wrote more than %d bytes", bin, registry, key, file, helperMaxStdout)
		}
		if res.TimedOut {
			return nil, fmt.Errorf("credential helper %s for %s (%s in %s) did not answer within %s and was killed", bin, registry, key, file, helperTimeout)
		}
		if strings.TrimSpace(string(res.Stdout)) == helperNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("running credential helper %s for %s (%s in %s): %w", bin, registry, key, file, err)
	}
	var out struct {
		Username string `json:"Username"`
		Secret   string `json:"Secret"`
	}
	if err := json.NewDecoder(bytes.NewReader(res.Stdout)).Decode(&out); err != nil {
		return nil, fmt.Errorf("credential helper %s for %s returned malformed output", bin, registry)
	}
	if out.Username == "" && out.Secret == "" {
		return nil, nil // an empty answer is none (getCredentialsWithHomeDir asks the next helper)
	}
	c := &wire.Credential{Source: source, File: file, Key: key, Username: out.Username, Password: out.Secret}
	if out.Username == "<token>" {
		c.Username, c.Password, c.IdentityToken = "", "", out.Secret
	}
	return c, nil
}

// helperBinary is the helper's program, docker-credential-NAME, found in
// PATH: a name that is not a plain name, or a program that is not there,
// is the error running it gives. explain, which runs no helper, checks
// each with it.
func helperBinary(helper, registry, file, key string) (string, error) {
	if helper == "" || strings.ContainsAny(helper, "/\x00") || helper == "." || helper == ".." {
		return "", fmt.Errorf("credential helper %q (%s in %s) is not a helper name: docker-credential-NAME is looked up in PATH", helper, key, file)
	}
	bin := "docker-credential-" + helper
	if _, err := exec.LookPath(bin); err != nil {
		return "", fmt.Errorf("running credential helper %s for %s (%s in %s): %w", bin, registry, key, file, err)
	}
	return bin, nil
}

// helperNotFound is docker-credential-helpers' errCredentialsNotFoundMessage.
const helperNotFound = "credentials not found in native keychain"

// Bounds on one credential helper run (runHelper).
const (
	helperTimeout   = 60 * time.Second
	helperMaxStdout = 1 << 20
	helperMaxStderr = 64 << 10
)

// readFile reads a file root reads for the caller: a regular file (a FIFO
// or a device is refused without blocking), at most safefile.MaxConfig
// bytes, symlinks followed as the owners of these formats do
// (containers/image, containerd and the kubelet all use os.ReadFile). A
// missing file still matches fs.ErrNotExist.
func readFile(path string) ([]byte, error) { return safefile.ReadFile(path, safefile.MaxConfig) }

// jsonErrorNoData describes a JSON error without quoting file content, which
// may hold a secret.
func jsonErrorNoData(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q has the wrong type (%s)", te.Field, te.Value)
	}
	return "malformed JSON"
}
