package auth

// containerd's registry credentials: configs."HOST".auth of the CRI
// plugin's config.toml (package hosts reads the file, with its imports and
// versions, and chooses the key per endpoint; containerdKeychain asks it).

import (
	"encoding/base64"
	"errors"
	"strings"

	"github.com/pullhelper/pullhelper/internal/wire"
)

const containerdSource = wire.CredentialContainerdConfig

// ParseContainerdAuth is containerd's ParseAuth for a configs.*.auth table
// (without a ServerAddress): it returns (username, secret). username wins,
// then identitytoken (as ("", token)), then auth: standard base64 with
// padding required, cut on the first ':', NUL bytes trimmed from both ends
// of the password. Otherwise anonymous. Unlike containerd, the "invalid
// decoded auth" error does not quote the decoded value.
func ParseContainerdAuth(username, password, auth, identityToken string) (string, string, error) {
	if username != "" {
		return username, password, nil
	}
	if identityToken != "" {
		return "", identityToken, nil
	}
	if auth != "" {
		// As containerd: decode into a DecodedLen buffer without slicing it,
		// so padding leaves trailing NULs, which the Trim below removes.
		decoded := make([]byte, base64.StdEncoding.DecodedLen(len(auth)))
		if _, err := base64.StdEncoding.Decode(decoded, []byte(auth)); err != nil {
			return "", "", err
		}
		user, passwd, ok := strings.Cut(string(decoded), ":")
		if !ok {
			return "", "", errors.New("invalid decoded auth")
		}
		return user, strings.Trim(passwd, "\x00"), nil
	}
	return "", "", nil
}
