package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxTokenBody bounds a token response (containers/image
// iolimits.MaxAuthTokenBodySize).
const maxTokenBody = 1 << 20

// minTokenLifetime is the shortest lifetime a token is given
// (distribution's token spec: 60 s when expires_in is absent or smaller).
const minTokenLifetime = 60 * time.Second

// challenge is one WWW-Authenticate challenge.
type challenge struct {
	scheme string // lower case
	params map[string]string
}

// supported is the first challenge the client can answer (Bearer or
// Basic), as containers/image picks it.
func supported(chs []challenge) (challenge, bool) {
	for _, c := range chs {
		if c.scheme == "bearer" || c.scheme == "basic" {
			return c, true
		}
	}
	return challenge{}, false
}

// Bounds on what parseChallenges keeps of one answer: a registry sends one
// or two challenges of a few parameters; the rest of a hostile answer's
// (the transport takes up to 1 MiB of headers, maxHeaderBytes) is not kept.
const (
	maxChallenges      = 16
	maxChallengeParams = 32
)

// parseChallenges reads the WWW-Authenticate headers of res (RFC 7235:
// scheme, then comma-separated key=value or key="quoted value"), at most
// maxChallenges of them, each of at most 8 KiB and maxChallengeParams
// parameters.
func parseChallenges(h http.Header) []challenge {
	var out []challenge
	for _, v := range h.Values("WWW-Authenticate") {
		if len(out) == maxChallenges {
			break
		}
		if len(v) > 8<<10 {
			continue
		}
		scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		c := challenge{scheme: strings.ToLower(scheme), params: map[string]string{}}
		for {
			rest = strings.TrimLeft(rest, " ,\t")
			if rest == "" {
				break
			}
			key, after, ok := strings.Cut(rest, "=")
			if !ok {
				break
			}
			if len(c.params) == maxChallengeParams {
				break
			}
			key = strings.ToLower(strings.TrimSpace(key))
			var val string
			if strings.HasPrefix(after, `"`) {
				var b strings.Builder
				i := 1
				for ; i < len(after); i++ {
					ch := after[i]
					if ch == '\\' && i+1 < len(after) {
						i++
						b.WriteByte(after[i])
						continue
					}
					if ch == '"' {
						break
					}
					b.WriteByte(ch)
				}
				val = b.String()
				if i < len(after) {
					i++
				}
				rest = after[i:]
			} else {
				val, rest, _ = strings.Cut(after, ",")
				val = strings.TrimSpace(val)
			}
			c.params[key] = val
		}
		out = append(out, c)
	}
	return out
}

// token returns a bearer token for the endpoint's repository under ch,
// fetching one when none is cached or the cached one expired; fresh says
// it was fetched now. Concurrent callers share one fetch.
func (h *host) token(ctx context.Context, ch challenge) (value string, fresh bool, err error) {
	realm, err := url.Parse(ch.params["realm"])
	if err != nil || realm.Host == "" || (realm.Scheme != "https" && realm.Scheme != "http") {
		return "", false, h.tokenError(ch.params["realm"], fmt.Errorf("the bearer challenge names no usable realm"))
	}
	scope := "repository:" + h.ep.Repository + ":pull"
	key := realm.String() + " " + ch.params["service"] + " " + scope
	h.mu.Lock()
	t := h.tokens[key]
	if t == nil {
		t = &token{}
		h.tokens[key] = t
	}
	h.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.value != "" && time.Now().Before(t.expires) {
		return t.value, false, nil
	}
	if h.c.hooks.Realm != nil {
		if err := h.c.hooks.Realm(&h.ep, realm); err != nil {
			return "", false, err
		}
	}
	v, life, err := h.fetchToken(ctx, realm, ch.params["service"], scope)
	if err != nil {
		return "", false, err
	}
	h.grant(v)
	t.value, t.expires = v, time.Now().Add(life)
	return v, true, nil
}

// fetchToken asks the realm for a token: an OAuth2 refresh-token POST with
// an identity token, else a GET with Basic credentials when there are any
// (anonymous otherwise), as containers/image's getBearerTokenOAuth2 and
// getBearerToken do. With Credential.OAuthFallback (containerd's
// semantics) a username and password are POSTed too, as an OAuth2
// password grant, and a POST the realm answers 404, 401 or 400 (or 405, for
// a password) is asked again as a GET with Basic credentials (the identity
// token as password with no user), as containerd's authorizer falls back
// from auth.FetchTokenWithOAuth to auth.FetchToken
// (core/remotes/docker/authorizer.go doBearerAuth).
func (h *host) fetchToken(ctx context.Context, realm *url.URL, service, scope string) (string, time.Duration, error) {
	cr := h.ep.Credential
	do := func(oauth bool) (*http.Response, error) {
		u := *realm
		q := u.Query()
		if service != "" {
			q.Set("service", service)
		}
		q.Set("scope", scope)
		var req *http.Request
		var err error
		if oauth {
			form := url.Values{}
			for k, v := range q {
				form[k] = v
			}
			if cr.IdentityToken != "" {
				form.Set("grant_type", "refresh_token")
				form.Set("refresh_token", cr.IdentityToken)
			} else {
				form.Set("grant_type", "password")
				form.Set("username", cr.Username)
				form.Set("password", cr.Password)
			}
			form.Set("client_id", "pullhelper")
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, realm.String(), strings.NewReader(form.Encode()))
			if err == nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
		} else {
			if cr != nil && cr.Username != "" {
				q.Set("account", cr.Username)
			}
			u.RawQuery = q.Encode()
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
			switch {
			case err != nil:
			case cr != nil && cr.Username != "" && cr.Password != "":
				req.SetBasicAuth(cr.Username, cr.Password)
			case cr != nil && cr.Username == "" && cr.IdentityToken != "":
				req.SetBasicAuth("", cr.IdentityToken)
			}
		}
		if err != nil {
			return nil, err
		}
		for k, v := range h.ep.Header {
			req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
		}
		if h.c.hooks.UserAgent != "" {
			req.Header.Set("User-Agent", h.c.hooks.UserAgent)
		}
		return h.client.Do(req)
	}
	// An identity token is always POSTed (containers/image and containerd
	// both); a username and password only under containerd's semantics
	// (OAuthFallback: its doBearerAuth POSTs every secret, a password as
	// grant_type=password), containers/image GETs with Basic instead.
	// containerd falls back to the GET on 404, 401 and 400, and on 405 for
	// a password.
	password := cr != nil && cr.IdentityToken == "" && cr.OAuthFallback && cr.Username != "" && cr.Password != ""
	oauth := cr != nil && cr.IdentityToken != "" || password
	res, err := do(oauth)
	if err == nil && oauth && cr.OAuthFallback && (res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusBadRequest ||
		res.StatusCode == http.StatusMethodNotAllowed && password) {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxTokenBody))
		res.Body.Close()
		res, err = do(false)
	}
	if err != nil {
		return "", 0, h.tokenError(realm.Redacted(), err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", 0, responseError(res, h.name(), "requesting a token from "+sanitize(realm.Redacted(), maxRealmText), h.secrets()...)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxTokenBody+1))
	if err != nil {
		return "", 0, h.tokenError(realm.Redacted(), err)
	}
	if len(b) > maxTokenBody {
		return "", 0, h.tokenError(realm.Redacted(), fmt.Errorf("token response larger than %d bytes", maxTokenBody))
	}
	var body struct {
		Token       string    `json:"token"`
		AccessToken string    `json:"access_token"`
		ExpiresIn   int64     `json:"expires_in"`
		IssuedAt    time.Time `json:"issued_at"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", 0, h.tokenError(realm.Redacted(), fmt.Errorf("decoding the token response: %v", err))
	}
	v := body.Token
	if v == "" {
		v = body.AccessToken
	}
	if v == "" {
		return "", 0, h.tokenError(realm.Redacted(), fmt.Errorf("the token response holds no token"))
	}
	life := time.Duration(body.ExpiresIn) * time.Second
	if body.ExpiresIn <= 0 || body.ExpiresIn > 1<<31 || life < minTokenLifetime {
		life = minTokenLifetime
	}
	if !body.IssuedAt.IsZero() {
		// A token's lifetime runs from issued_at; a clock that disagrees
		// only shortens it to the minimum.
		if until := time.Until(body.IssuedAt.Add(life)); until < life {
			life = max(until, minTokenLifetime)
		}
	}
	return v, life, nil
}
