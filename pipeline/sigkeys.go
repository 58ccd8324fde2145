package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/signature"
)

// Bounds of the key files a signature policy names, read by the parent
// for the copy and for its own re-check.
const (
	maxPolicyKeyFile  = 1 << 20 // each file
	maxPolicyKeyTotal = 8 << 20 // all of one policy's files together
)

// The fields of a requirement that name files, with the inline field
// containers/image (signature/policy_types.go, v5.42.1) reads instead.
// signedBy has keyData only: its keyPaths become one keyData.
var (
	sigstoreKeyFields = []keyField{
		{path: "keyPath", data: "keyData"},
		{path: "keyPaths", data: "keyDatas", many: true},
		{path: "rekorPublicKeyPath", data: "rekorPublicKeyData"},
		{path: "rekorPublicKeyPaths", data: "rekorPublicKeyDatas", many: true},
	}
	fulcioKeyFields = []keyField{{path: "caPath", data: "caData"}}
	pkiKeyFields    = []keyField{
		{path: "caRootsPath", data: "caRootsData"},
		{path: "caIntermediatesPath", data: "caIntermediatesData"},
	}
)

type keyField struct {
	path, data string
	many       bool // a list of paths → a list of data
}

// inlinePolicyKeys returns the signature policy b (already accepted by
// signature.NewPolicyFromBytes, so every field is one containers/image
// knows and none is repeated) with every key file it names read here and
// inlined: signedBy keyPath/keyPaths → keyData; sigstoreSigned keyPath →
// keyData, keyPaths → keyDatas, rekorPublicKeyPath(s) →
// rekorPublicKeyData(s), fulcio caPath → caData, pki caRootsPath and
// caIntermediatesPath → caRootsData and caIntermediatesData. Every other
// field is kept as written. The copy (whose mount namespace and uid are
// not the caller's) and the parent's re-check then read no file, and each
// file is read as invariant 2 wants: a regular file (a FIFO or a device
// is refused without being opened for reading), symlinks followed as
// containers/image's os.ReadFile follows them, at most maxPolicyKeyFile bytes (maxPolicyKeyTotal
// for all of them). A relative path is read relative to the working
// directory, as containers/image's os.ReadFile reads it (the policy file's
// directory plays no part). Errors are failure.Usage naming the policy file
// and the key file, never their content.
func inlinePolicyKeys(policyFile string, b []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, failure.New(failure.Usage, "signature policy %s: %s", policyFile, safefile.Redact(err.Error()))
	}
	r := &keyReader{policy: policyFile, read: map[string][]byte{}}
	if raw, ok := top["default"]; ok {
		out, err := r.requirements(raw)
		if err != nil {
			return nil, err
		}
		top["default"] = out
	}
	if raw, ok := top["transports"]; ok && !isNull(raw) {
		var transports map[string]map[string]json.RawMessage
		if err := json.Unmarshal(raw, &transports); err != nil {
			return nil, failure.New(failure.Usage, "signature policy %s: transports: %s", policyFile, safefile.Redact(err.Error()))
		}
		for _, t := range slices.Sorted(maps.Keys(transports)) {
			for _, s := range slices.Sorted(maps.Keys(transports[t])) {
				out, err := r.requirements(transports[t][s])
				if err != nil {
					return nil, err
				}
				transports[t][s] = out
			}
		}
		out, err := json.Marshal(transports)
		if err != nil {
			return nil, failure.Wrap(failure.Internal, err, "rendering signature policy %s", policyFile)
		}
		top["transports"] = out
	}
	if !r.changed {
		return b, nil
	}
	out, err := json.Marshal(top)
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "rendering signature policy %s", policyFile)
	}
	return out, nil
}

// keyReader reads a policy's key files, each path once.
type keyReader struct {
	policy  string
	read    map[string][]byte
	total   int64
	changed bool
}

func (r *keyReader) file(field, path string) ([]byte, error) {
	if b, ok := r.read[path]; ok {
		return b, nil
	}
	b, err := safefile.ReadFile(path, maxPolicyKeyFile)
	if err != nil {
		return nil, failure.New(failure.Usage, "signature policy %s: %s %s: %w", r.policy, field, path, reason(err))
	}
	if r.total += int64(len(b)); r.total > maxPolicyKeyTotal {
		return nil, failure.New(failure.Usage, "signature policy %s: %s %s: the key files it names are more than %d MiB together", r.policy, field, path, maxPolicyKeyTotal>>20)
	}
	r.read[path] = b
	return b, nil
}

// requirements rewrites one list of requirements (a JSON array; null is
// kept).
func (r *keyReader) requirements(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return raw, nil
	}
	var reqs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &reqs); err != nil {
		return nil, failure.New(failure.Usage, "signature policy %s: %s", r.policy, safefile.Redact(err.Error()))
	}
	changed := false
	for _, req := range reqs {
		var typ string
		_ = json.Unmarshal(req["type"], &typ)
		var c bool
		var err error
		switch typ {
		case "signedBy":
			c, err = r.signedBy(req)
		case "sigstoreSigned":
			c, err = r.fields(req, sigstoreKeyFields)
			for _, nested := range []struct {
				name   string
				fields []keyField
			}{{"fulcio", fulcioKeyFields}, {"pki", pkiKeyFields}} {
				if err != nil {
					break
				}
				var nc bool
				nc, err = r.nested(req, nested.name, nested.fields)
				c = c || nc
			}
		}
		if err != nil {
			return nil, err
		}
		changed = changed || c
	}
	if !changed {
		return raw, nil
	}
	r.changed = true
	out, err := json.Marshal(reqs)
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "rendering signature policy %s", r.policy)
	}
	return out, nil
}

// nested rewrites the object req[name] (fulcio, pki), when there is one.
func (r *keyReader) nested(req map[string]json.RawMessage, name string, fields []keyField) (bool, error) {
	raw, ok := req[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return false, failure.New(failure.Usage, "signature policy %s: %s: %s", r.policy, name, safefile.Redact(err.Error()))
	}
	c, err := r.fields(obj, fields)
	if err != nil || !c {
		return false, err
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return false, failure.Wrap(failure.Internal, err, "rendering signature policy %s", r.policy)
	}
	req[name] = out
	return true, nil
}

// fields replaces each path field of obj by its data field. An empty path
// (which containers/image treats as absent) and an empty or null list are
// left as written.
func (r *keyReader) fields(obj map[string]json.RawMessage, fields []keyField) (bool, error) {
	changed := false
	for _, f := range fields {
		raw, ok := obj[f.path]
		if !ok || isNull(raw) {
			continue
		}
		var data any
		if f.many {
			var paths []string
			if err := json.Unmarshal(raw, &paths); err != nil || len(paths) == 0 {
				continue
			}
			datas := make([][]byte, len(paths))
			for i, p := range paths {
				b, err := r.file(f.path, p)
				if err != nil {
					return false, err
				}
				datas[i] = b
			}
			data = datas
		} else {
			var path string
			if err := json.Unmarshal(raw, &path); err != nil || path == "" {
				continue
			}
			b, err := r.file(f.path, path)
			if err != nil {
				return false, err
			}
			data = b
		}
		out, err := json.Marshal(data) // []byte: base64, as containers/image decodes it
		if err != nil {
			return false, failure.Wrap(failure.Internal, err, "rendering signature policy %s", r.policy)
		}
		delete(obj, f.path)
		obj[f.data] = out
		changed = true
	}
	return changed, nil
}

// signedBy inlines a signedBy requirement's keyPath or keyPaths as its
// keyData (signedBy has no keyDatas). One file is its keyData as it is;
// several are combined into one binary keyring that imports the same keys
// in the same order as containers/image's openpgp mechanism importing each
// file (combineKeyrings).
func (r *keyReader) signedBy(req map[string]json.RawMessage) (bool, error) {
	if raw, ok := req["keyPath"]; ok {
		var path string
		if json.Unmarshal(raw, &path) != nil || path == "" {
			return false, nil
		}
		b, err := r.file("keyPath", path)
		if err != nil {
			return false, err
		}
		return r.setData(req, "keyPath", b)
	}
	raw, ok := req["keyPaths"]
	if !ok || isNull(raw) {
		return false, nil
	}
	var paths []string
	if json.Unmarshal(raw, &paths) != nil || len(paths) == 0 {
		return false, nil
	}
	blobs := make([][]byte, len(paths))
	for i, p := range paths {
		b, err := r.file("keyPaths", p)
		if err != nil {
			return false, err
		}
		blobs[i] = b
	}
	b := blobs[0]
	if len(blobs) > 1 {
		var ok bool
		if b, ok = combineKeyrings(blobs); !ok {
			return false, failure.New(failure.Usage, "signature policy %s: keyPaths %s: the keys of these files cannot be handed to the copy as one keyData (signedBy has no keyDatas); name one keyring file in keyPath",
				r.policy, strings.Join(paths, ", "))
		}
	}
	return r.setData(req, "keyPaths", b)
}

func (r *keyReader) setData(req map[string]json.RawMessage, pathField string, b []byte) (bool, error) {
	out, err := json.Marshal(b)
	if err != nil {
		return false, failure.Wrap(failure.Internal, err, "rendering signature policy %s", r.policy)
	}
	delete(req, pathField)
	req["keyData"] = out
	return true, nil
}

// combineKeyrings turns several key files into one keyData that
// containers/image's openpgp mechanism (mechanism_openpgp.go:
// importKeysFromBytes, a binary keyring or else an armored one, for each
// file in order) reads as it reads the files: when a file is neither, that
// file alone (the import fails on it as it would, at the first such file);
// otherwise the binary packets of each, concatenated, which must read back
// as the same keys in the same order (false when they do not).
func combineKeyrings(blobs [][]byte) ([]byte, bool) {
	var all bytes.Buffer
	var want []string
	for _, b := range blobs {
		bin, ids, ok := binaryKeyring(b)
		if !ok {
			return b, true
		}
		all.Write(bin)
		want = append(want, ids...)
	}
	got, err := openpgp.ReadKeyRing(bytes.NewReader(all.Bytes()))
	if err != nil || len(got) != len(want) {
		return nil, false
	}
	for i, e := range got {
		if fingerprint(e) != want[i] {
			return nil, false
		}
	}
	return all.Bytes(), true
}

// binaryKeyring reads b as importKeysFromBytes does and returns its binary
// form and its keys' fingerprints.
func binaryKeyring(b []byte) ([]byte, []string, bool) {
	bin := b
	el, err := openpgp.ReadKeyRing(bytes.NewReader(b))
	if err != nil {
		if el, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(b)); err != nil {
			return nil, nil, false
		}
		block, err := armor.Decode(bytes.NewReader(b))
		if err != nil {
			return nil, nil, false
		}
		if bin, err = io.ReadAll(block.Body); err != nil {
			return nil, nil, false
		}
	}
	ids := []string{}
	for _, e := range el {
		if e.PrimaryKey != nil {
			ids = append(ids, fingerprint(e))
		}
	}
	return bin, ids, true
}

func fingerprint(e *openpgp.Entity) string {
	if e.PrimaryKey == nil {
		return ""
	}
	return fmt.Sprintf("%X", e.PrimaryKey.Fingerprint)
}

// sigstoreScope returns the docker scope identity of named's pull when its
// requirements ask for sigstore signatures (sigstoreSigned): the policy is
// looked up for the reference as requested (pull.PolicyReference), as the
// copy and the re-check look it up.
func sigstoreScope(pol *signature.Policy, named reference.Named) (string, bool) {
	ref, err := docker.NewReference(pull.PolicyReference(named))
	if err != nil {
		return "", false
	}
	return ref.PolicyConfigurationIdentity(), needsSigstore(pol, ref)
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
