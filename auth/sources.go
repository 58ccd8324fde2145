package auth

// The credential sources, one Keychain each (NewKeyring composes them).

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/regpattern"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
)

// Resolve implements Keychain: a kubelet keyring (pull secrets, the node
// docker config) is matched against the image's repository, as the
// kubelet's Lookup(repoToPull) is.
func (k *KubeletKeyring) Resolve(q hosts.Query) ([]wire.Credential, error) {
	return k.Lookup(q.Logical), nil
}

// providerKeychain is the kubelet's credential-provider plugins, run once
// per repository (never when run is false: explain only says which would
// run and why the others are skipped).
type providerKeychain struct {
	cfg                 *ProviderConfig
	bin, file, cacheDir string
	run                 bool
	sa                  *ProviderServiceAccount
	cache               map[string][]wire.Credential
}

// Resolve implements Keychain.
func (p *providerKeychain) Resolve(q hosts.Query) ([]wire.Credential, error) {
	repository := q.Logical
	if cs, ok := p.cache[repository]; ok {
		return cs, nil
	}
	var creds []wire.Credential
	var skipped []string
	var errs []error
	if !p.run {
		plan, err := PlanProviders(p.cfg, repository, p.sa)
		if err != nil {
			errs = append(errs, fmt.Errorf("credential provider: %w", err))
		}
		run := 0
		for _, d := range plan {
			if d.Skipped != "" {
				skipped = append(skipped, fmt.Sprintf("%q: %s", d.Name, d.Skipped))
			} else {
				run++
			}
		}
		if run > 0 {
			creds = []wire.Credential{{Source: "credential-provider", File: p.file,
				Key: "(plugins run at pull time; not run by explain)"}}
		}
	} else {
		var err error
		creds, skipped, err = cpProviders(p.cfg, p.bin, repository, p.cacheDir, ProviderOptions{ServiceAccount: p.sa})
		if err != nil {
			// The kubelet logs a failing provider and pulls with the rest.
			errs = append(errs, fmt.Errorf("credential provider: %w", err))
		}
	}
	for _, s := range skipped {
		errs = append(errs, errors.New("credential provider "+s+" (skipped for "+repository+", as the kubelet skips it)"))
	}
	p.cache[repository] = creds
	return creds, errors.Join(errs...)
}

// serviceAccountKeychain offers a service-account token file (or the token
// itself, data) to the endpoint hosts matching patterns
// (auth.service_account_registries).
type serviceAccountKeychain struct {
	file, username string
	data           []byte
	patterns       []regpattern.Pattern
}

// Resolve implements Keychain.
func (s *serviceAccountKeychain) Resolve(q hosts.Query) ([]wire.Credential, error) {
	c, err := serviceAccountToken(s.file, s.data, s.username, s.patterns, q.Host)
	if err != nil || c == nil {
		return nil, err
	}
	return []wire.Credential{*c}, nil
}

// containerdKeychain is containerd's configs."KEY".auth through ParseAuth,
// KEY being q.ContainerdKey (package hosts chooses it: the endpoint host,
// in both modes).
type containerdKeychain struct{ hosts *hosts.Resolver }

// Resolve implements Keychain.
func (k *containerdKeychain) Resolve(q hosts.Query) ([]wire.Credential, error) {
	if q.ContainerdKey == "" {
		return nil, nil
	}
	a, file, key := k.hosts.ContainerdAuth(q.ContainerdKey)
	if a == nil {
		return nil, nil
	}
	user, secret, err := ParseContainerdAuth(a.Username, a.Password, a.Auth, a.IdentityToken)
	if err != nil {
		// ParseAuth's error fails containerd's request to the host.
		return nil, lookupFailed(fmt.Errorf("containerd config %s: %s: %w", file, key, err))
	}
	if user == "" && secret == "" {
		return nil, nil
	}
	c := wire.Credential{Source: containerdSource, File: file, Key: key, Username: user, Password: secret}
	if user == "" {
		c.Password, c.IdentityToken = "", secret
	}
	return []wire.Credential{c}, nil
}

// helperKeychain is one registries.conf credential-helper, looked up by the
// repository on the contacted host (q.Physical), as newDockerClientFromRef
// does: "containers-auth.json" walks the auth files, any other NAME runs
// docker-credential-NAME (not when run is false: explain says it would).
// warn gets what containers/image only warns about.
type helperKeychain struct {
	name      string
	authFiles []wire.AuthFile
	run       bool
	confName  string
	warn      func(string)
}

func newHelperKeychain(name string, authFiles []wire.AuthFile, run bool, confName string, warn func(string)) *helperKeychain {
	return &helperKeychain{name: name, authFiles: authFiles, run: run, confName: confName, warn: warn}
}

// placeholder: explain lists a helper it does not run and goes on.
func (h *helperKeychain) placeholder() bool {
	return !h.run && h.name != sysregistriesv2.AuthenticationFileHelper
}

// Resolve implements Keychain. An error names the registry
// ("looking up credentials for REGISTRY: ...") and is a LookupError:
// getCredentialsWithHomeDir fails the lookup with it unless a later helper
// has a credential (First).
func (h *helperKeychain) Resolve(q hosts.Query) ([]wire.Credential, error) {
	registry, _, _ := strings.Cut(q.Physical, "/")
	var c *wire.Credential
	var err error
	switch {
	case h.name == sysregistriesv2.AuthenticationFileHelper:
		c, err = lookupContainers(h.authFiles, q.Physical, lookupOpts{Warn: h.warn, Explain: !h.run})
	case !h.run:
		if _, err = helperBinary(h.name, registry, h.confName, "credential-helpers "+h.name); err == nil {
			c = &wire.Credential{Source: "credential-helper", File: h.confName,
				Key: "credential-helpers " + h.name + ": docker-credential-" + h.name + " get " + registry + " (run at pull time; not run by explain)"}
		}
	default:
		c, err = runHelper(h.name, registry, "credential-helper", h.confName, "credential-helpers "+h.name)
	}
	if err != nil {
		return nil, lookupFailed(fmt.Errorf("looking up credentials for %s: %w", registry, err))
	}
	if c == nil {
		return nil, nil
	}
	return []wire.Credential{*c}, nil
}
