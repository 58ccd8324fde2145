package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/auth"
)

// saJWT builds an unsigned JWT with the claims the API server writes into a
// bound service-account token.
func saJWT(t *testing.T, aud any, ns, name, uid, salt string) string {
	t.Helper()
	claims := map[string]any{
		"aud": aud, "sub": "system:serviceaccount:" + ns + ":" + name, "jti": salt,
		"kubernetes.io": map[string]any{"namespace": ns, "serviceaccount": map[string]string{"name": name, "uid": uid}},
	}
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(b) + ".c2ln"
}

func saWriteToken(t *testing.T, dir, token string) string {
	t.Helper()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func saAttrs(cacheType string, require bool, required, optional []string) map[string]any {
	ta := map[string]any{"serviceAccountTokenAudience": "registry.example.com", "cacheType": cacheType, "requireServiceAccount": require}
	if required != nil {
		ta["requiredServiceAccountAnnotationKeys"] = required
	}
	if optional != nil {
		ta["optionalServiceAccountAnnotationKeys"] = optional
	}
	return map[string]any{"tokenAttributes": ta}
}

// TestProvidersServiceAccount mirrors plugin.go pluginProvider.provide and
// serviceAccountProvider.getServiceAccountData: who gets the token, which
// annotations are sent, who is skipped and why.
func TestProvidersServiceAccount(t *testing.T) {
	fake := provBuildFake(t)
	resp := provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "u:" + provSecret})
	token := saJWT(t, []string{"registry.example.com"}, "team-a", "puller", "uid-1", "1")
	annotations := map[string]string{"example.com/role": "pull", "example.com/opt": "yes", "example.com/other": "not-listed"}
	tests := []struct {
		name     string
		extra    map[string]any
		sa       bool
		tokenStr string // "" = token
		wantRun  bool
		wantReq  map[string]any // the request's service-account fields
		skipped  string
	}{
		{"no tokenAttributes: neither token nor annotations", nil, true, "", true, map[string]any{}, ""},
		{"token and the listed annotations", saAttrs("ServiceAccount", true, []string{"example.com/role"}, []string{"example.com/opt", "example.com/absent"}), true, "", true,
			map[string]any{"serviceAccountToken": token, "serviceAccountAnnotations": map[string]any{"example.com/role": "pull", "example.com/opt": "yes"}}, ""},
		{"no annotation keys: token only", saAttrs("Token", true, nil, nil), true, "", true, map[string]any{"serviceAccountToken": token}, ""},
		{"required annotation missing: skipped", saAttrs("ServiceAccount", true, []string{"example.com/missing"}, nil), true, "", false, nil,
			"required annotation example.com/missing not found"},
		{"no service account, required: skipped", saAttrs("ServiceAccount", true, nil, nil), false, "", false, nil,
			"requires a service account (tokenAttributes.requireServiceAccount: true) and none was given"},
		{"no service account, optional: runs without token", saAttrs("ServiceAccount", false, nil, []string{"example.com/opt"}), false, "", true, map[string]any{}, ""},
		{"token for another audience: skipped", saAttrs("Token", true, nil, nil), true, saJWT(t, "other-audience", "team-a", "puller", "uid-1", "1"), false, nil,
			`the service account token's audiences "other-audience" do not include "registry.example.com"`},
		{"opaque token: sent as is", saAttrs("Token", true, nil, nil), true, "opaque-" + provSecret, true, map[string]any{"serviceAccountToken": "opaque-" + provSecret}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newProvSetupWith(t, fake)
			cfg := s.config(provSpec{Name: "p", Match: []string{"registry.example.com"}, Response: resp, Extra: tt.extra})
			tok := tt.tokenStr
			if tok == "" {
				tok = token
			}
			var sa *auth.ProviderServiceAccount
			if tt.sa {
				sa = &auth.ProviderServiceAccount{TokenFile: saWriteToken(t, s.dir, tok), Annotations: annotations}
			}
			plan, err := auth.PlanProviders(cfg, "registry.example.com/r:1", sa)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != 1 || plan[0].Name != "p" || !strings.Contains(plan[0].Skipped, tt.skipped) || (plan[0].Skipped == "") != tt.wantRun {
				t.Fatalf("plan: %+v, want skipped containing %q", plan, tt.skipped)
			}
			if strings.Contains(plan[0].Skipped, tok) {
				t.Errorf("the reason quotes the token")
			}
			creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r:1", "", auth.ProviderOptions{ServiceAccount: sa})
			if err != nil {
				t.Fatal(err)
			}
			calls := s.calls()
			if !tt.wantRun {
				if len(calls) != 0 || len(creds) != 0 {
					t.Fatalf("a skipped provider ran: %+v %+v", calls, creds)
				}
				return
			}
			if len(calls) != 1 || len(creds) != 1 {
				t.Fatalf("runs %+v, credentials %+v", calls, creds)
			}
			got := map[string]any{}
			for _, k := range []string{"serviceAccountToken", "serviceAccountAnnotations"} {
				if v, ok := calls[0].Request[k]; ok {
					got[k] = v
				}
			}
			if !reflect.DeepEqual(got, tt.wantReq) {
				t.Errorf("request service-account fields: got %v, want %v", got, tt.wantReq)
			}
		})
	}
}

// TestProvidersServiceAccountEcho: with cacheType ServiceAccount a plugin
// may not hand the token back as the password (plugin.go provide); with
// Token it may. The token is never in the error.
func TestProvidersServiceAccountEcho(t *testing.T) {
	fake := provBuildFake(t)
	token := saJWT(t, "registry.example.com", "ns", "sa", "uid", provSecret)
	for _, cacheType := range []string{"ServiceAccount", "Token"} {
		t.Run(cacheType, func(t *testing.T) {
			s := newProvSetupWith(t, fake)
			cfg := s.config(provSpec{Name: "echo", Match: []string{"registry.example.com"}, Extra: saAttrs(cacheType, true, nil, nil),
				Response: provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "u:" + token})})
			sa := &auth.ProviderServiceAccount{TokenFile: saWriteToken(t, s.dir, token)}
			creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{ServiceAccount: sa})
			if cacheType == "Token" {
				if err != nil || len(creds) != 1 || creds[0].Password != token {
					t.Fatalf("got %+v, %v", creds, err)
				}
				return
			}
			if len(creds) != 0 || err == nil || !strings.Contains(err.Error(), "returned the service account token as the password") {
				t.Fatalf("got %+v, %v", creds, err)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), provSecret) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
}

// TestProvidersServiceAccountCache: the cache key is generateCacheKey(base,
// generateServiceAccountCacheKey(...)): namespace, name, UID and the
// annotations sent; for cacheType Token also the token's hash.
func TestProvidersServiceAccountCache(t *testing.T) {
	fake := provBuildFake(t)
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	aud := "registry.example.com"
	type step struct {
		token string
		ann   map[string]string
		none  bool // no service account
		runs  int
	}
	a1, a2 := saJWT(t, aud, "ns", "sa", "uid-1", "1"), saJWT(t, aud, "ns", "sa", "uid-1", "2") // one SA, two tokens
	b1 := saJWT(t, aud, "other-ns", "sa", "uid-2", "1")
	role := func(v string) map[string]string { return map[string]string{"example.com/role": v} }
	tests := []struct {
		name, cacheType string
		require         bool
		steps           []step
	}{
		{"ServiceAccount: a new token of the same account hits", "ServiceAccount", true, []step{
			{token: a1, runs: 1}, {token: a2, runs: 1}, {token: b1, runs: 2}, {token: a1, runs: 2},
		}},
		{"Token: every token is its own entry", "Token", true, []step{
			{token: a1, runs: 1}, {token: a1, runs: 1}, {token: a2, runs: 2}, {token: a1, runs: 2},
		}},
		{"annotations are part of the key", "ServiceAccount", true, []step{
			{token: a1, ann: role("a"), runs: 1}, {token: a2, ann: role("a"), runs: 1}, {token: a1, ann: role("b"), runs: 2},
		}},
		{"no service account and a service account do not share", "ServiceAccount", false, []step{
			{none: true, runs: 1}, {none: true, runs: 1}, {token: a1, runs: 2}, {none: true, runs: 2},
		}},
		{"opaque tokens never share, whatever the cacheType", "ServiceAccount", true, []step{
			{token: "opaque-1", runs: 1}, {token: "opaque-1", runs: 1}, {token: "opaque-2", runs: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newProvSetupWith(t, fake)
			cfg := s.config(provSpec{Name: "sa", Match: []string{"registry.example.com"}, Default: "1h",
				Extra:    saAttrs(tt.cacheType, tt.require, nil, []string{"example.com/role"}),
				Response: provResponse(provV1, "Registry", "", map[string]string{"registry.example.com": "u:p"})})
			opts := auth.ProviderOptions{Now: func() time.Time { return t0 }}
			for i, st := range tt.steps {
				opts.ServiceAccount = nil
				if !st.none {
					opts.ServiceAccount = &auth.ProviderServiceAccount{TokenFile: saWriteToken(t, s.dir, st.token), Annotations: st.ann}
				}
				if _, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", s.cacheDir, opts); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := s.pluginCalls(); got != st.runs {
					t.Errorf("step %d: %d runs, want %d", i, got, st.runs)
				}
			}
			data, err := os.ReadFile(filepath.Join(s.cacheDir, "sa.json"))
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{a1, a2, b1, "opaque-1"} {
				if strings.Contains(string(data), secret) {
					t.Errorf("the cache file holds a token")
				}
			}
		})
	}
}

// TestProvidersServiceAccountUnreadable: a token that cannot be read skips
// the provider that wants it (the kubelet's "Error getting service account
// token"), not the others.
func TestProvidersServiceAccountUnreadable(t *testing.T) {
	s := newProvSetup(t)
	resp := provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "u:p"})
	cfg := s.config(
		provSpec{Name: "wants-token", Match: []string{"registry.example.com"}, Response: resp, Extra: saAttrs("Token", true, nil, nil)},
		provSpec{Name: "plain", Match: []string{"registry.example.com"}, Response: resp},
	)
	sa := &auth.ProviderServiceAccount{TokenFile: filepath.Join(s.dir, "missing")}
	plan, err := auth.PlanProviders(cfg, "registry.example.com/r", sa)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || !strings.Contains(plan[0].Skipped, "error getting the service account token: reading service account token "+sa.TokenFile) || plan[1].Skipped != "" {
		t.Fatalf("plan %+v", plan)
	}
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{ServiceAccount: sa})
	if err != nil || len(creds) != 1 || creds[0].File != "plain" {
		t.Fatalf("got %+v, %v", creds, err)
	}
}
