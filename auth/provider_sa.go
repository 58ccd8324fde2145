package auth

// Service-account tokens for credential providers (KEP-4412,
// KubeletServiceAccountTokenForCredentialProviders, beta in 1.34):
// kubernetes pkg/credentialprovider/plugin/plugin.go pluginProvider.provide,
// serviceAccountProvider.getServiceAccountData, generateServiceAccountCacheKey
// and generateCacheKey.
//
// The kubelet asks the API server for a token bound to the pod, for the
// provider's serviceAccountTokenAudience, and reads the service account's
// annotations. pullhelper pulls for no pod and talks to no API server: the
// agent hands over the token (a file) and the annotations
// (ProviderServiceAccount). Given those, what happens per provider is the
// kubelet's:
//   - a provider without tokenAttributes gets neither token nor annotations;
//   - no service account and requireServiceAccount: true: the provider is
//     skipped (provide returns an empty DockerConfig); false: it runs without
//     token and annotations;
//   - a requiredServiceAccountAnnotationKeys key the service account lacks:
//     skipped (requiredAnnotationNotFoundError); the request's
//     serviceAccountAnnotations hold the required keys and those optional
//     keys that are present, nothing else;
//   - a token that cannot be read: skipped, with the error (the kubelet's
//     "Error getting service account token");
//   - a plugin that answers with the token itself as a password while
//     cacheType is not Token: the response is not used;
//   - the cache key is the image/registry/global key plus the service
//     account's key: namespace, name, UID and the annotations sent, plus the
//     token's hash for cacheType Token.
//
// Where it differs, and why:
//   - The kubelet mints one token per audience. A file holds one token, so
//     when it is a JWT whose "aud" claim does not include the provider's
//     audience the provider is skipped (the plugin would be sent a token
//     minted for somebody else).
//   - The service account's namespace, name and UID come from the token's
//     claims (kubernetes.io.namespace, kubernetes.io.serviceaccount.name and
//     .uid, as the API server writes them), unverified: the plugin or the
//     registry verifies the token. When the token is not such a JWT the
//     identity is unknown, and the token's hash is part of the cache key for
//     either cacheType, so no two tokens ever share a cached credential.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ProviderServiceAccount is the pod's service account as the agent supplies
// it to credential providers with tokenAttributes.
type ProviderServiceAccount struct {
	// TokenFile holds the service-account token (read when a provider needs
	// it; never logged).
	TokenFile string
	// TokenData, when not nil, is the token itself (an inline token,
	// --provider-service-account-token-fd; TokenFile then only names it).
	TokenData []byte
	// Annotations are the service account's annotations; only the keys a
	// provider lists in tokenAttributes are sent to it.
	Annotations map[string]string
}

// ProviderDecision is what the kubelet does with one provider whose
// matchImages match the image.
type ProviderDecision struct {
	Name string
	// Skipped says why the provider does not run ("" when it runs).
	Skipped string

	token       string
	annotations map[string]string
	saKey       string
	cacheType   string
}

// cpTokenClaims are the JWT claims read from a service-account token.
type cpTokenClaims struct {
	Aud json.RawMessage `json:"aud"`
	K8s struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// cpParseToken reads the unverified claims of a JWT; nil if token is not one.
func cpParseToken(token string) *cpTokenClaims {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil
	}
	var c cpTokenClaims
	if json.Unmarshal(payload, &c) != nil {
		return nil
	}
	return &c
}

// audiences is the "aud" claim: a string or a list (RFC 7519 4.1.3).
func (c *cpTokenClaims) audiences() ([]string, bool) {
	if len(c.Aud) == 0 {
		return nil, false
	}
	var one string
	if json.Unmarshal(c.Aud, &one) == nil {
		return []string{one}, true
	}
	var list []string
	if json.Unmarshal(c.Aud, &list) == nil {
		return list, true
	}
	return nil, false
}

// PlanProviders lists, in config order, the providers whose matchImages
// match image (any reference; matched in the kubelet's repository form) and
// whether each runs, given the service account sa (nil = none). It reads
// the token file only when a matching provider wants the token.
func PlanProviders(cfg *ProviderConfig, image string, sa *ProviderServiceAccount) ([]ProviderDecision, error) {
	if cfg == nil {
		return nil, nil
	}
	repo, err := cpRepository(image)
	if err != nil {
		return nil, err
	}
	return cpPlan(cfg, repo, sa), nil
}

func cpPlan(cfg *ProviderConfig, repo string, sa *ProviderServiceAccount) []ProviderDecision {
	var out []ProviderDecision
	var token string
	var claims *cpTokenClaims
	var tokenErr error
	read := false
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		if !cpImageAllowed(p.MatchImages, repo) {
			continue
		}
		d := ProviderDecision{Name: p.Name}
		ta := p.TokenAttributes
		switch {
		case ta == nil || ta.ServiceAccountTokenAudience == "":
			// newServiceAccountProvider returns nil: no token mode.
		case sa == nil:
			if ta.RequireServiceAccount != nil && *ta.RequireServiceAccount {
				d.Skipped = "it requires a service account (tokenAttributes.requireServiceAccount: true) and none was given (--provider-service-account-token)"
			}
		default:
			d.annotations = map[string]string{}
			for _, k := range ta.RequiredServiceAccountAnnotationKeys {
				v, ok := sa.Annotations[k]
				if !ok {
					d.Skipped = fmt.Sprintf("required annotation %s not found (tokenAttributes.requiredServiceAccountAnnotationKeys; --provider-service-account-annotation)", k)
					break
				}
				d.annotations[k] = v
			}
			if d.Skipped != "" {
				break
			}
			for _, k := range ta.OptionalServiceAccountAnnotationKeys {
				if v, ok := sa.Annotations[k]; ok {
					d.annotations[k] = v
				}
			}
			if !read {
				read = true
				token, tokenErr = satToken(sa.TokenFile, sa.TokenData)
				if tokenErr == nil {
					claims = cpParseToken(token)
				}
			}
			if tokenErr != nil {
				d.Skipped = "error getting the service account token: " + tokenErr.Error()
				break
			}
			if claims != nil {
				if auds, ok := claims.audiences(); ok && !cpContains(auds, ta.ServiceAccountTokenAudience) {
					d.Skipped = fmt.Sprintf("the service account token's audiences %s do not include %q (tokenAttributes.serviceAccountTokenAudience)",
						cpQuoteList(auds), ta.ServiceAccountTokenAudience)
					break
				}
			}
			d.token, d.cacheType = token, ta.CacheType
			d.saKey = cpServiceAccountCacheKey(claims, d.annotations, token, ta.CacheType)
		}
		if d.Skipped != "" {
			d.annotations = nil
		}
		out = append(out, d)
	}
	return out
}

// cpServiceAccountCacheKey is generateServiceAccountCacheKey: namespace,
// name, UID, the annotations sent (sorted by key), and for cacheType Token
// the token's hash -- or always the hash when the token names no service
// account. Hashed, so the cache file holds neither annotation values nor
// anything derived reversibly from the token.
func cpServiceAccountCacheKey(claims *cpTokenClaims, annotations map[string]string, token, cacheType string) string {
	var b []byte
	add := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	known := claims != nil && claims.K8s.Namespace != "" && claims.K8s.ServiceAccount.Name != ""
	if known {
		add(claims.K8s.Namespace)
		add(claims.K8s.ServiceAccount.Name)
		add(claims.K8s.ServiceAccount.UID)
	} else {
		add("")
		add("")
		add("")
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		add(k)
		add(annotations[k])
	}
	if cacheType == cpCacheToken || !known {
		sum := sha256.Sum256([]byte(token))
		add("token")
		add("sha256:" + hex.EncodeToString(sum[:]))
	}
	sum := sha256.Sum256(b)
	return "sa:sha256:" + hex.EncodeToString(sum[:])
}

// cpCacheKey is generateCacheKey: the base key (image, registry or
// "global") joined with the service account's key.
func cpCacheKey(base, saKey string) string {
	if saKey == "" {
		return base
	}
	return base + "\x00" + saKey
}
