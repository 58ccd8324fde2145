package pipeline

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/signature"
)

// testKey returns a fresh OpenPGP public key: binary, or armored.
func testKey(t *testing.T, name string, armored bool) ([]byte, string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if !armored {
		if err := e.Serialize(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes(), fingerprint(e)
	}
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), fingerprint(e)
}

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// requirement returns the first requirement of scope ("" : default) of the
// rewritten policy as a generic object.
func requirement(t *testing.T, pol []byte, transport, scope string) map[string]any {
	t.Helper()
	var p struct {
		Default    []map[string]any                       `json:"default"`
		Transports map[string]map[string][]map[string]any `json:"transports"`
	}
	if err := json.Unmarshal(pol, &p); err != nil {
		t.Fatal(err)
	}
	if transport == "" {
		return p.Default[0]
	}
	return p.Transports[transport][scope][0]
}

func inlined(t *testing.T, policy string) []byte {
	t.Helper()
	if _, err := signature.NewPolicyFromBytes([]byte(policy)); err != nil {
		t.Fatalf("the test's policy: %v", err)
	}
	out, err := inlinePolicyKeys("/etc/test-policy.json", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signature.NewPolicyFromBytes(out); err != nil {
		t.Fatalf("containers/image refuses the rewritten policy: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("Path")) {
		t.Fatalf("a path is left in the rewritten policy:\n%s", out)
	}
	return out
}

func dataField(t *testing.T, obj map[string]any, field string) []byte {
	t.Helper()
	b, err := json.Marshal(obj[field])
	if err != nil {
		t.Fatal(err)
	}
	var d []byte
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not base64: %v (%s)", field, err, b)
	}
	return d
}

func dataFields(t *testing.T, obj map[string]any, field string) [][]byte {
	t.Helper()
	b, err := json.Marshal(obj[field])
	if err != nil {
		t.Fatal(err)
	}
	var d [][]byte
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not a list of base64: %v (%s)", field, err, b)
	}
	return d
}

// signedBy keyPath (absolute, and relative: to the working directory, as
// containers/image's os.ReadFile reads it) becomes keyData; every other
// field stays as written.
func TestInlinePolicyKeysSignedByKeyPath(t *testing.T) {
	dir := t.TempDir()
	key, _ := testKey(t, "a", true)
	abs := writeFile(t, filepath.Join(dir, "pub.gpg"), key)
	out := inlined(t, `{"default":[{"type":"reject"}],"transports":{"docker":{"reg.example/app":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"`+abs+`","signedIdentity":{"type":"matchRepository"}}],"reg.example/other":[{"type":"insecureAcceptAnything"}]},"atomic":{"":[{"type":"reject"}]}}}`)
	r := requirement(t, out, "docker", "reg.example/app")
	if !bytes.Equal(dataField(t, r, "keyData"), key) {
		t.Fatal("keyData is not the key file")
	}
	if r["keyType"] != "GPGKeys" || r["signedIdentity"].(map[string]any)["type"] != "matchRepository" {
		t.Fatalf("the other fields changed: %v", r)
	}
	if requirement(t, out, "docker", "reg.example/other")["type"] != "insecureAcceptAnything" || requirement(t, out, "atomic", "")["type"] != "reject" ||
		requirement(t, out, "", "")["type"] != "reject" {
		t.Fatalf("other requirements changed:\n%s", out)
	}

	t.Chdir(dir)
	out = inlined(t, `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"pub.gpg"}]}`)
	if !bytes.Equal(dataField(t, requirement(t, out, "", ""), "keyData"), key) {
		t.Fatal("the relative keyPath was not read from the working directory")
	}
	// Nothing to read: the bytes as they were.
	const plain = `{"default": [{"type": "insecureAcceptAnything"}]}`
	if out, err := inlinePolicyKeys("/p.json", []byte(plain)); err != nil || string(out) != plain {
		t.Fatalf("a policy without key files: %q, %v", out, err)
	}
}

// signedBy keyPaths (which has no keyDatas) become one keyData importing
// the same keys in the same order; a file that is no keyring becomes the
// keyData alone, so that the import fails as containers/image's fails.
func TestInlinePolicyKeysSignedByKeyPaths(t *testing.T) {
	dir := t.TempDir()
	k1, f1 := testKey(t, "one", true)
	k2, f2 := testKey(t, "two", false)
	p1, p2 := writeFile(t, filepath.Join(dir, "1.asc"), k1), writeFile(t, filepath.Join(dir, "2.gpg"), k2)
	out := inlined(t, `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPaths":["`+p1+`","`+p2+`"]}]}`)
	data := dataField(t, requirement(t, out, "", ""), "keyData")
	el, err := openpgp.ReadKeyRing(bytes.NewReader(data))
	if err != nil || len(el) != 2 || fingerprint(el[0]) != f1 || fingerprint(el[1]) != f2 {
		t.Fatalf("keyData imports %d keys (%v), want %s and %s", len(el), err, f1, f2)
	}
	// One file: its bytes as they are.
	out = inlined(t, `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPaths":["`+p1+`"]}]}`)
	if !bytes.Equal(dataField(t, requirement(t, out, "", ""), "keyData"), k1) {
		t.Fatal("a single keyPaths file is not its keyData")
	}
	bad := writeFile(t, filepath.Join(dir, "bad"), []byte("not a key"))
	out = inlined(t, `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPaths":["`+p1+`","`+bad+`"]}]}`)
	if !bytes.Equal(dataField(t, requirement(t, out, "", ""), "keyData"), []byte("not a key")) {
		t.Fatal("a file that is no keyring is not the keyData")
	}
}

// sigstoreSigned: every path field, at the top and in fulcio and pki,
// becomes its data field.
func TestInlinePolicyKeysSigstore(t *testing.T) {
	dir := t.TempDir()
	f := func(name string) string { return writeFile(t, filepath.Join(dir, name), []byte("content of "+name)) }
	out := inlined(t, `{"default":[{"type":"reject"}],"transports":{"docker":{
		"a.example/k":[{"type":"sigstoreSigned","keyPath":"`+f("k.pub")+`","rekorPublicKeyPath":"`+f("rekor.pub")+`","signedIdentity":{"type":"matchRepository"}}],
		"a.example/ks":[{"type":"sigstoreSigned","keyPaths":["`+f("k1.pub")+`","`+f("k2.pub")+`"],"rekorPublicKeyPaths":["`+f("r1.pub")+`"]}],
		"a.example/fulcio":[{"type":"sigstoreSigned","fulcio":{"caPath":"`+f("ca.pem")+`","oidcIssuer":"https://issuer.example","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"`+f("rekor.pub")+`"}],
		"a.example/pki":[{"type":"sigstoreSigned","pki":{"caRootsPath":"`+f("roots.pem")+`","caIntermediatesPath":"`+f("int.pem")+`","subjectEmail":"a@example.com"}}]}}}`)
	want := func(obj map[string]any, field, name string) {
		t.Helper()
		if got := dataField(t, obj, field); string(got) != "content of "+name {
			t.Errorf("%s = %q, want the content of %s", field, got, name)
		}
	}
	k := requirement(t, out, "docker", "a.example/k")
	want(k, "keyData", "k.pub")
	want(k, "rekorPublicKeyData", "rekor.pub")
	ks := requirement(t, out, "docker", "a.example/ks")
	if d := dataFields(t, ks, "keyDatas"); len(d) != 2 || string(d[0]) != "content of k1.pub" || string(d[1]) != "content of k2.pub" {
		t.Errorf("keyDatas = %q", d)
	}
	if d := dataFields(t, ks, "rekorPublicKeyDatas"); len(d) != 1 || string(d[0]) != "content of r1.pub" {
		t.Errorf("rekorPublicKeyDatas = %q", d)
	}
	fu := requirement(t, out, "docker", "a.example/fulcio")["fulcio"].(map[string]any)
	want(fu, "caData", "ca.pem")
	if fu["oidcIssuer"] != "https://issuer.example" || fu["subjectEmail"] != "a@example.com" {
		t.Errorf("fulcio's other fields changed: %v", fu)
	}
	pki := requirement(t, out, "docker", "a.example/pki")["pki"].(map[string]any)
	want(pki, "caRootsData", "roots.pem")
	want(pki, "caIntermediatesData", "int.pem")
}

// A key file that is a FIFO (refused without blocking), a directory,
// missing, over 1 MiB, or the files over 8 MiB together: exit 2 naming the
// policy file and the key file, never the content.
func TestInlinePolicyKeysRefusesFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := "SECRETKEYCONTENT"
	small := writeFile(t, filepath.Join(dir, "small"), []byte(secret))
	big := writeFile(t, filepath.Join(dir, "big"), []byte(secret+strings.Repeat("x", 1<<20)))
	var many []string
	for i := range 9 {
		many = append(many, writeFile(t, filepath.Join(dir, "k"+string(rune('a'+i))), []byte(secret+strings.Repeat("y", 1<<20-len(secret)))))
	}
	manyJSON, _ := json.Marshal(many)
	for _, tc := range []struct{ name, policy, path string }{
		{"FIFO keyPath", `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"` + fifo + `"}]}`, fifo},
		{"FIFO in sigstore keyPaths", `{"default":[{"type":"sigstoreSigned","keyPaths":["` + fifo + `"]}]}`, fifo},
		{"FIFO fulcio caPath", `{"default":[{"type":"sigstoreSigned","fulcio":{"caPath":"` + fifo + `","oidcIssuer":"https://i.example","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"` + small + `"}]}`, fifo},
		{"directory", `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"` + dir + `"}]}`, dir},
		{"missing", `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"` + dir + `/none"}]}`, dir + "/none"},
		{"over 1 MiB", `{"transports":{"docker":{"x.example":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"` + big + `"}]}},"default":[{"type":"reject"}]}`, big},
		{"over 8 MiB together", `{"default":[{"type":"sigstoreSigned","keyPaths":` + string(manyJSON) + `}]}`, many[8]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			guarded(t, "inlinePolicyKeys", func() { _, err = inlinePolicyKeys("/etc/test-policy.json", []byte(tc.policy)) })
			if err == nil || failure.CodeOf(err) != failure.Usage {
				t.Fatalf("err = %v, want a usage error (exit 2)", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "/etc/test-policy.json") || !strings.Contains(msg, tc.path) || strings.Contains(msg, secret) {
				t.Fatalf("message %q: want the policy file and %s named, no content", msg, tc.path)
			}
		})
	}
}

// LoadMaterial hands the copy (and the re-check) the policy with its key
// file inlined, read from a FIFO-free regular file, and refuses a policy
// whose requirements for this image are sigstoreSigned (the copy sees only
// simple signing signatures) — not one whose sigstoreSigned scope is
// another image's.
func TestLoadMaterialSignaturePolicy(t *testing.T) {
	dir := t.TempDir()
	key, _ := testKey(t, "a", false)
	kp := writeFile(t, filepath.Join(dir, "pub.gpg"), key)
	for _, tc := range []struct {
		name, image, scope string
		refused            bool
	}{
		{"this repository's scope", "reg.example:5000/secure/app:1", "reg.example:5000/secure/app", true},
		{"a namespace of it", "reg.example:5000/secure/app:1", "reg.example:5000/secure", true},
		{"the host", "reg.example:5000/secure/app", "reg.example:5000", true},
		{"the tag as requested", "reg.example:5000/secure/app:1", "reg.example:5000/secure/app:1", true},
		{"another tag", "reg.example:5000/secure/app:1", "reg.example:5000/secure/app:2", false},
		// A pull by tag is judged by the tag (pull.PolicyReference), not
		// by the digest it resolves to.
		{"a digest of this repository, IMAGE by tag", "reg.example:5000/secure/app:1", "reg.example:5000/secure/app@sha256:" + strings.Repeat("1", 64), false},
		{"that digest, IMAGE by it", "reg.example:5000/secure/app@sha256:" + strings.Repeat("1", 64), "reg.example:5000/secure/app@sha256:" + strings.Repeat("1", 64), true},
		{"another digest, IMAGE by digest", "reg.example:5000/secure/app@sha256:" + strings.Repeat("2", 64), "reg.example:5000/secure/app@sha256:" + strings.Repeat("1", 64), false},
		{"another repository", "reg.example:5000/secure/app:1", "reg.example:5000/secure/other", false},
		{"a more specific scope of this one takes precedence", "reg.example:5000/secure/app:1", "reg.example:5000/secure", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := `{"default":[{"type":"reject"}],"transports":{"docker":{"` + tc.scope + `":[{"type":"sigstoreSigned","keyPath":"` + kp + `"}]`
			if tc.name == "a more specific scope of this one takes precedence" {
				pol += `,"reg.example:5000/secure/app":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"` + kp + `"}]`
			}
			pol += `}}}`
			file := writeFile(t, filepath.Join(t.TempDir(), "policy.json"), []byte(pol))
			p := &Plan{}
			p.Reference = tc.image
			p.Signature = api.SignaturePolicy{Source: "flag", File: file}
			err := p.refuseSigstore(mustPolicy(t, pol))
			if tc.refused {
				if err == nil || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), file) ||
					!strings.Contains(err.Error(), "cannot check sigstore signatures") {
					t.Fatalf("err = %v, want exit 2 naming %s", err, file)
				}
				if _, err := p.LoadMaterial(); err == nil || failure.CodeOf(err) != failure.Usage {
					t.Fatalf("LoadMaterial: %v, want exit 2", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustPolicy(t *testing.T, s string) *signature.Policy {
	t.Helper()
	p, err := signature.NewPolicyFromBytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
