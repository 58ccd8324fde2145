package cri

import (
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// versionRuntime answers RuntimeService/Version with a runtime_name, as
// containerd's criService.Version and CRI-O's server.Version do.
type versionRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	name, version string
}

func (v *versionRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: v.name, RuntimeVersion: v.version, RuntimeApiVersion: "v1"}, nil
}

func serveVersion(t *testing.T, name, version string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "rt.sock")
	serveFake(t, sock, nil, &versionRuntime{name: name, version: version})
	return sock
}

// Detect names the runtime by its Version answer; another runtime, or no
// answer, is exit 2 naming --runtime.
func TestDetect(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, version, want string }{
		{"containerd", "v2.4.2", RuntimeContainerd},
		{"cri-o", "1.36.0", RuntimeCRIO},
	} {
		rt, err := Detect(ctx, serveVersion(t, tc.name, tc.version), 30*time.Second, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rt.Name != tc.want || rt.Version != tc.version || rt.From != "Version" {
			t.Errorf("%s: got %+v", tc.name, rt)
		}
	}
	for _, name := range []string{"docker", "", strings.Repeat("x", 10000)} {
		_, err := Detect(ctx, serveVersion(t, name, "1"), 30*time.Second, nil)
		if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--runtime containerd or --runtime cri-o") {
			t.Errorf("runtime_name %.10q: got %v", name, err)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("runtime_name %.10q: the error is not bounded (%d bytes)", name, len(err.Error()))
		}
	}
	// Nothing listens: the bounded wait ends in exit 2.
	_, err := Detect(ctx, filepath.Join(t.TempDir(), "none.sock"), 200*time.Millisecond, nil)
	if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "no answer within 200ms") || !strings.Contains(err.Error(), "--runtime") {
		t.Errorf("no runtime: got %v", err)
	}
	// Through a dialer (pullhelper cri's checks the socket is root's): its
	// connection is used, and its refusal is the reason given.
	sock := serveVersion(t, "cri-o", "1.36.0")
	var dials atomic.Int32
	rt, err := Detect(ctx, sock, 30*time.Second, func(ctx context.Context, p string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", p)
	})
	if err != nil || rt.Name != RuntimeCRIO || dials.Load() == 0 {
		t.Errorf("through a dialer: %+v %v (%d dials)", rt, err, dials.Load())
	}
	_, err = Detect(ctx, sock, 200*time.Millisecond, func(context.Context, string) (net.Conn, error) {
		return nil, errors.New("runtime socket " + sock + " is owned by uid 65534, not root")
	})
	if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a refused socket: %v", err)
	}
	if _, err := ParseRuntime("crio"); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--runtime") {
		t.Errorf("--runtime crio: got %v", err)
	}
	for _, v := range []string{"auto", "containerd", "cri-o"} {
		if got, err := ParseRuntime(v); err != nil || got != v {
			t.Errorf("--runtime %s: got %q, %v", v, got, err)
		}
	}
}

// The image and DEST of a request, and image_ref, as each runtime's CRI
// has them: containerd normalises to docker.io and answers sha256:ID
// (criService.PullImage); CRI-O leaves short names to registries.conf
// (CandidatesForPotentiallyShortImageName) and answers the bare storage
// ID (resolveImageRefToID).
func TestRuntimeNames(t *testing.T) {
	ctrd, crio := Runtime{}, Runtime{Name: RuntimeCRIO, Store: "[vfs@/g+/r]"}
	for _, tc := range []struct {
		rt          Runtime
		raw, image  string
		short       bool
		dest, error string
	}{
		{ctrd, "busybox", "docker.io/library/busybox:latest", false, "containerd:docker.io/library/busybox:latest", ""},
		{ctrd, "reg:5000/a/b@sha256:" + strings.Repeat("a", 64), "reg:5000/a/b@sha256:" + strings.Repeat("a", 64), false, "containerd:reg:5000/a/b@sha256:" + strings.Repeat("a", 64), ""},
		{crio, "busybox", "busybox", true, "", ""},
		{crio, "library/busybox:1", "library/busybox:1", true, "", ""},
		{crio, "quay.io/a/b", "quay.io/a/b:latest", false, "containers-storage:[vfs@/g+/r]quay.io/a/b:latest", ""},
		{crio, "localhost/x:2", "localhost/x:2", false, "containers-storage:[vfs@/g+/r]localhost/x:2", ""},
		{crio, "reg:5000/a/b:3", "reg:5000/a/b:3", false, "containers-storage:[vfs@/g+/r]reg:5000/a/b:3", ""},
		{crio, "reg:5000/a/b@sha256:" + strings.Repeat("a", 64), "reg:5000/a/b@sha256:" + strings.Repeat("a", 64), false, "containers-storage:[vfs@/g+/r]reg:5000/a/b@sha256:" + strings.Repeat("a", 64), ""},
		{crio, "reg:5000/a/b:3@sha256:" + strings.Repeat("a", 64), "reg:5000/a/b@sha256:" + strings.Repeat("a", 64), false, "containers-storage:[vfs@/g+/r]reg:5000/a/b@sha256:" + strings.Repeat("a", 64), ""},
		{crio, "Bad Name", "", false, "", "invalid reference format"},
	} {
		image, short, err := tc.rt.normalize(tc.raw)
		if tc.error != "" {
			if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("%s %q: want an error with %q, got %v", tc.rt.name(), tc.raw, tc.error, err)
			}
			continue
		}
		if err != nil || image != tc.image || short != tc.short {
			t.Errorf("%s %q: got %q short=%v %v", tc.rt.name(), tc.raw, image, short, err)
			continue
		}
		if !short && tc.rt.Dest(image) != tc.dest {
			t.Errorf("%s %q: DEST %q, want %q", tc.rt.name(), tc.raw, tc.rt.Dest(image), tc.dest)
		}
	}
	id := "sha256:" + strings.Repeat("b", 64)
	if got := ctrd.imageRef(id); got != id {
		t.Errorf("containerd image_ref %q", got)
	}
	if got := crio.imageRef(id); got != strings.Repeat("b", 64) {
		t.Errorf("cri-o image_ref %q", got)
	}
}

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// CRI-O's precedence (Config.UpdateFromFile, UpdateFromPath,
// UpdateFromDropInFile): storage.conf, crio.conf, then the drop-ins in
// lexical order, recursively; an empty value keeps the one before;
// storage_option appends, duplicates dropped keeping the last.
func TestLoadCRIOStorage(t *testing.T) {
	dir := t.TempDir()
	base := CRIOSettings{Root: "/var/lib/containers/storage", RunRoot: "/run/containers/storage", Driver: "overlay", Options: []string{"o1", "o2"}}
	conf := write(t, filepath.Join(dir, "crio.conf"), "[crio]\nroot = \"/c/root\"\nstorage_driver = \"vfs\"\nstorage_option = [\"o2\", \"o3\"]\nlog_dir = \"/x\"\n[crio.runtime]\ncgroup_manager = \"cgroupfs\"\n")
	d := filepath.Join(dir, "crio.conf.d")
	write(t, filepath.Join(d, "10-run.conf"), "[crio]\nrunroot = \"/d/run\"\n")
	write(t, filepath.Join(d, "20-empty.conf"), "[crio]\nroot = \"\"\nstorage_driver = \"\"\nstorage_option = [\"o1\"]\n")
	write(t, filepath.Join(d, "05-first", "99-sub.conf"), "[crio]\nroot = \"/sub/root\"\n")
	write(t, filepath.Join(d, "30-last"), "[crio]\nroot = \"/last/root\"\n# no .conf suffix: CRI-O reads every file\n")
	got, err := LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d})
	if err != nil {
		t.Fatal(err)
	}
	want := CRIOSettings{Root: "/last/root", RunRoot: "/d/run", Driver: "vfs", Options: []string{"o2", "o3", "o1"},
		Files: []string{conf, filepath.Join(d, "05-first", "99-sub.conf"), filepath.Join(d, "10-run.conf"), filepath.Join(d, "20-empty.conf"), filepath.Join(d, "30-last")}}
	if got.Root != want.Root || got.RunRoot != want.RunRoot || got.Driver != want.Driver || !slices.Equal(got.Options, want.Options) || !slices.Equal(got.Files, want.Files) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !slices.Equal(base.Options, []string{"o1", "o2"}) {
		t.Errorf("base changed: %v", base.Options)
	}
	spec, err := got.StoreSpec(base)
	if err != nil || spec != "[vfs@/last/root+/d/run:o2,o3,o1]" {
		t.Errorf("StoreSpec: %q %v", spec, err)
	}

	// Without files: storage.conf's store, its options left to it.
	missing := filepath.Join(dir, "none.conf")
	got, err = LoadCRIOSettings(base, CRIOConfig{File: missing, Dir: filepath.Join(dir, "none.d")})
	if err != nil || got.Root != base.Root || len(got.Files) != 0 {
		t.Fatalf("missing default files: %+v %v", got, err)
	}
	if spec, err := got.StoreSpec(base); err != nil || spec != "[overlay@/var/lib/containers/storage+/run/containers/storage]" {
		t.Errorf("StoreSpec of storage.conf's: %q %v", spec, err)
	}
	// An explicit --crio-config that is missing fails, as CRI-O's does.
	if _, err := LoadCRIOSettings(base, CRIOConfig{File: missing, FileSet: true}); !errors.Is(err, fs.ErrNotExist) || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--crio-config") {
		t.Errorf("explicit missing file: %v", err)
	}
	// A dangling link as the drop-in directory is skipped (os.Stat); a
	// dangling link below it fails (os.ReadFile), exit 2.
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling.d")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCRIOSettings(base, CRIOConfig{Dir: filepath.Join(dir, "dangling.d")}); err != nil {
		t.Errorf("a dangling drop-in directory: %v", err)
	}
	ld := filepath.Join(dir, "links.d")
	if err := os.MkdirAll(ld, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(ld, "10.conf")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCRIOSettings(base, CRIOConfig{Dir: ld}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "10.conf") {
		t.Errorf("a dangling drop-in: %v", err)
	}
	// A drop-in "directory" that is a file is read as one (filepath.Walk
	// of a file).
	if got, err := LoadCRIOSettings(base, CRIOConfig{Dir: filepath.Join(d, "10-run.conf")}); err != nil || got.RunRoot != "/d/run" {
		t.Errorf("drop-in path a file: %+v %v", got, err)
	}
}

// A file CRI-O's loader fails on ("unable to decode configuration") fails
// here too, exit 2, naming the file and never its content; so does one
// that is not a regular file, and a drop-in directory beyond the bound.
func TestLoadCRIOStorageBroken(t *testing.T) {
	dir := t.TempDir()
	base := CRIOSettings{Root: "/g", RunRoot: "/r"}
	const secret = "secretTokenValue"
	for name, content := range map[string]string{
		"syntax.conf": "[crio]\nroot = \"/x\n# " + secret + "\n",
		"bare.conf":   "[crio]\nroot = " + secret + "\n",
		"type.conf":   "[crio]\nroot = 1\nrunroot = \"" + secret + "\"\n",
		"option.conf": "[crio]\nstorage_option = \"" + secret + "\"\n",
		"dup.conf":    "[crio]\nroot = \"/a\"\nroot = \"" + secret + "\"\n",
	} {
		p := write(t, filepath.Join(dir, name), content)
		_, err := LoadCRIOSettings(base, CRIOConfig{File: p, FileSet: true})
		if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "unable to decode") {
			t.Errorf("%s: got %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error repeats the file's content: %v", name, err)
		}
		// The same file as a drop-in fails the same way.
		d := filepath.Join(dir, "d-"+name)
		write(t, filepath.Join(d, "00.conf"), content)
		if _, err := LoadCRIOSettings(base, CRIOConfig{Dir: d}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--crio-config-dir") {
			t.Errorf("%s as a drop-in: got %v", name, err)
		}
	}
	if _, err := LoadCRIOSettings(base, CRIOConfig{File: dir, FileSet: true}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "not a readable file") {
		t.Errorf("a directory as crio.conf: %v", err)
	}
	many := filepath.Join(dir, "many")
	for i := 0; i <= maxCRIODropIns; i++ {
		write(t, filepath.Join(many, strings.Repeat("a", 1+i/26)+string(rune('a'+i%26))), "")
	}
	if _, err := LoadCRIOSettings(base, CRIOConfig{Dir: many}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "more than") {
		t.Errorf("too many drop-ins: %v", err)
	}
}

// What a containers-storage: store specifier cannot spell is refused,
// naming the key.
func TestCRIOStoreSpecRefusals(t *testing.T) {
	base := CRIOSettings{Root: "/g", RunRoot: "/r", Options: []string{"overlay.mountopt=nodev,metacopy=on"}}
	for _, tc := range []struct {
		s    CRIOSettings
		want string
	}{
		{CRIOSettings{Root: "/g+x", RunRoot: "/r"}, "root"},
		{CRIOSettings{Root: "/g", RunRoot: "/r:x"}, "runroot"},
		{CRIOSettings{Root: "rel", RunRoot: "/r"}, "absolute"},
		{CRIOSettings{Root: "/g", RunRoot: "/r", ImageStore: "/i"}, "imagestore"},
		{CRIOSettings{Root: "/g", RunRoot: "/r", Options: []string{"overlay.mountopt=nodev,metacopy=on", "x=1"}}, "storage_option 1 of 2"},
	} {
		if _, err := tc.s.StoreSpec(base); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: want %q, got %v", tc.s, tc.want, err)
		}
	}
	// storage.conf's own options (a comma in one) are left to it.
	if spec, err := (CRIOSettings{Root: "/g", RunRoot: "/r", Options: base.Options}).StoreSpec(base); err != nil || spec != "[/g+/r]" {
		t.Errorf("storage.conf's options: %q %v", spec, err)
	}
}

// Serve in front of CRI-O: the Request carries the runtime and the
// containers-storage: DEST (none for a short name, which the hook
// resolves), a digest goes to containers-storage:[STORE]REPO@DIGEST, a
// malformed one is InvalidArgument before any plan, and image_ref is the
// ID without sha256:, as CRI-O's PullImage answers.
func TestServeCRIO(t *testing.T) {
	dir := t.TempDir()
	phSock := filepath.Join(dir, "ph", "cri.sock")
	var planned []Request
	id := strings.Repeat("c", 64)
	cfg := Config{
		Listen: phSock, Runtime: serveVersion(t, "cri-o", "1.36.0"), MaxParallel: 1,
		RuntimeKind: Runtime{Name: RuntimeCRIO, Store: "[vfs@/g+/r]"},
		Plan: func(r Request) (*pipeline.Plan, error) {
			planned = append(planned, r)
			return &pipeline.Plan{}, nil
		},
		Run: func(context.Context, *pipeline.Plan, pipeline.Options) (*api.Result, error) {
			return &api.Result{ImageID: "sha256:" + id}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := Serve(ctx, cfg); served <- err }()
	conn := dialCRI(t, phSock)
	defer conn.Close()
	c := runtimeapi.NewImageServiceClient(conn)
	for _, image := range []string{"quay.io/a/b", "busybox"} {
		res, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}, grpc.WaitForReady(true))
		if err != nil || res.ImageRef != id {
			t.Fatalf("PullImage %s: %v %v", image, res, err)
		}
	}
	if len(planned) != 2 || planned[0].Image != "quay.io/a/b:latest" || planned[0].Dest != "containers-storage:[vfs@/g+/r]quay.io/a/b:latest" ||
		planned[1].Image != "busybox" || planned[1].Dest != "" || planned[1].Runtime.Dest("x.io/busybox:latest") != "containers-storage:[vfs@/g+/r]x.io/busybox:latest" {
		t.Fatalf("planned %+v", planned)
	}
	res, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "quay.io/a/b@sha256:" + id}})
	if err != nil || res.ImageRef != id || len(planned) != 3 || planned[2].Dest != "containers-storage:[vfs@/g+/r]quay.io/a/b@sha256:"+id {
		t.Fatalf("by digest: %v %v (%+v)", res, err, planned)
	}
	_, err = c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "quay.io/a/b@sha256:short"}})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || len(planned) != 3 {
		t.Fatalf("a bad digest: %v (%d plans)", err, len(planned))
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// CRI-O's PullImage reads the AuthConfig its own way: auth (decoded) over
// username and password, identity_token never, nothing without a
// username; containerd's is left to credentialFor (ParseAuth).
func TestCRIOAuthConfig(t *testing.T) {
	crio := Runtime{Name: RuntimeCRIO}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		a        *runtimeapi.AuthConfig
		user     string
		identity bool
		none     bool
	}{
		{&runtimeapi.AuthConfig{Username: "u1", Password: "p1", Auth: b64("u2:p2")}, "u2", false, false},
		{&runtimeapi.AuthConfig{Username: "u1", Password: "p1", IdentityToken: "tok"}, "u1", false, false},
		{&runtimeapi.AuthConfig{IdentityToken: "tok"}, "", false, true},
		{&runtimeapi.AuthConfig{Password: "p1"}, "", false, true},
		// decodeDockerAuth: no colon is no credential, nor is an empty
		// username (never an identity token, as containerd would read
		// ":secret"), and the password's NULs go.
		{&runtimeapi.AuthConfig{Auth: b64("justauser")}, "", false, true},
		{&runtimeapi.AuthConfig{Auth: b64(":somesecret")}, "", false, true},
		{&runtimeapi.AuthConfig{Username: "u1", Password: "p1", Auth: b64("justauser")}, "", false, true},
		{&runtimeapi.AuthConfig{Auth: b64("u3:p3\x00\x00")}, "u3", false, false},
	} {
		ac, err := crio.authConfig(tc.a)
		if err != nil {
			t.Fatalf("%v: %v", tc.a, err)
		}
		c, err := credentialFor(ac, "reg.io/a:1")
		if err != nil {
			t.Fatalf("%v: %v", tc.a, err)
		}
		if c != nil && c.Request != nil && strings.ContainsRune(c.Request.Password, 0) {
			t.Errorf("%v: the password keeps its NULs", tc.a)
		}
		if tc.none {
			if c != nil {
				t.Errorf("%v: want no credential, got %+v", tc.a, c)
			}
			continue
		}
		if c == nil || c.Username != tc.user || c.Request == nil || c.Request.IdentityToken != "" {
			t.Errorf("%v: got %+v", tc.a, c)
		}
	}
	// Base64 that does not decode is an error, as CRI-O's.
	if _, err := crio.authConfig(&runtimeapi.AuthConfig{Auth: "not base64!"}); err == nil || strings.Contains(err.Error(), "not base64!") {
		t.Errorf("CRI-O undecodable auth: %v; want an error that does not quote it", err)
	}
	// containerd's: the identity token is a credential (ParseAuth).
	cac, _ := Runtime{}.authConfig(&runtimeapi.AuthConfig{IdentityToken: "tok"})
	if c, err := credentialFor(cac, "reg.io/a:1"); err != nil || c == nil || c.Request == nil || c.Request.IdentityToken != "tok" {
		t.Errorf("containerd identity token: %+v %v", c, err)
	}
	// CRI-O ignores identity_token and registry_token: the log line's
	// ignored says so, with no value.
	a := &runtimeapi.AuthConfig{IdentityToken: "tok-s3cr3t", RegistryToken: "rt-s3cr3t"}
	iac, _ := crio.authConfig(a)
	c, _ := credentialFor(iac, "reg.io/a:1")
	c = crioIgnored(c, a, "reg.io/a:1")
	if c == nil || c.Request != nil || !strings.Contains(c.Ignored, "identity_token, registry_token") || strings.Contains(c.Ignored, "s3cr3t") || c.Host != "reg.io" {
		t.Errorf("CRI-O ignored: %+v", c)
	}
	if got := c.redact("echo tok-s3cr3t rt-s3cr3t"); strings.Contains(got, "s3cr3t") {
		t.Errorf("not redacted: %q", got)
	}
}

// The runtime's socket is reconnected to as the kubelet's CRI client does
// (k8s.io/cri-client: backoff from 100 ms, at most 3 s, a 5 s connect
// timeout), not with gRPC's default (at most 120 s), which left forwarded
// calls failing for 16–39 s after a restarted containerd answered again.
func TestRuntimeConnectParamsAreTheKubelets(t *testing.T) {
	p := runtimeConnectParams
	if p.Backoff.BaseDelay != 100*time.Millisecond || p.Backoff.MaxDelay != 3*time.Second || p.MinConnectTimeout != 5*time.Second ||
		p.Backoff.Multiplier != 1.6 || p.Backoff.Jitter != 0.2 {
		t.Errorf("runtime connect params %+v, want the kubelet's: base 100ms, max 3s, multiplier 1.6, jitter 0.2, connect 5s", p)
	}
}

// [crio.image] signature_policy and signature_policy_dir follow the same
// precedence (the last file that sets one wins, an empty value too); the
// directory defaults to CRI-O's /etc/crio/policies and must be absolute.
func TestLoadCRIOSignaturePolicies(t *testing.T) {
	dir := t.TempDir()
	base := CRIOSettings{Root: "/r", RunRoot: "/rr"}
	got, err := LoadCRIOSettings(base, CRIOConfig{File: filepath.Join(dir, "none.conf")})
	if err != nil || got.SignaturePolicy != "" || got.SignaturePolicyDir != CRIODefaultSignaturePolicyDir {
		t.Fatalf("no files: %+v %v; want no policy and %s", got, err, CRIODefaultSignaturePolicyDir)
	}
	conf := write(t, filepath.Join(dir, "crio.conf"), "[crio.image]\nsignature_policy = \"/etc/crio/policy.json\"\nsignature_policy_dir = \"/p/one\"\n")
	d := filepath.Join(dir, "crio.conf.d")
	write(t, filepath.Join(d, "10.conf"), "[crio.image]\nsignature_policy_dir = \"/p/two\"\n")
	got, err = LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d})
	if err != nil || got.SignaturePolicy != "/etc/crio/policy.json" || got.SignaturePolicyDir != "/p/two" {
		t.Fatalf("got %+v %v; want policy /etc/crio/policy.json, dir /p/two", got, err)
	}
	write(t, filepath.Join(d, "20.conf"), "[crio.image]\nsignature_policy = \"\"\n")
	if got, err = LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d}); err != nil || got.SignaturePolicy != "" {
		t.Fatalf("an empty signature_policy in a later drop-in: %+v %v; want it empty", got, err)
	}
	write(t, filepath.Join(d, "30.conf"), "[crio.image]\nsignature_policy_dir = \"relative/dir\"\n")
	if _, err = LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "signature_policy_dir \"relative/dir\"") {
		t.Fatalf("a relative signature_policy_dir: %v; want exit 2 naming it", err)
	}
}

// [crio.image] global_auth_file: the last file that sets it wins (an empty
// value too), as for the signature policy.
func TestLoadCRIOGlobalAuthFile(t *testing.T) {
	dir := t.TempDir()
	base := CRIOSettings{Root: "/r", RunRoot: "/rr"}
	conf := write(t, filepath.Join(dir, "crio.conf"), "[crio.image]\nglobal_auth_file = \"/var/lib/kubelet/config.json\"\n")
	d := filepath.Join(dir, "crio.conf.d")
	got, err := LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d})
	if err != nil || got.GlobalAuthFile != "/var/lib/kubelet/config.json" {
		t.Fatalf("got %+v %v; want global_auth_file /var/lib/kubelet/config.json", got, err)
	}
	write(t, filepath.Join(d, "10.conf"), "[crio.image]\nglobal_auth_file = \"\"\n")
	if got, err = LoadCRIOSettings(base, CRIOConfig{File: conf, FileSet: true, Dir: d}); err != nil || got.GlobalAuthFile != "" {
		t.Fatalf("an empty global_auth_file in a later drop-in: %+v %v; want it empty", got, err)
	}
}

// CRI-O's per-namespace signature policy: DIR/NAMESPACE.json when it exists
// (else none: the node's applies); a namespace that is not a DNS label is
// refused before any path is made of it; containerd has none.
func TestNamespacePolicy(t *testing.T) {
	dir := t.TempDir()
	strict := write(t, filepath.Join(dir, "strict.json"), `{"default":[{"type":"reject"}]}`)
	crio := Runtime{Name: RuntimeCRIO, SignaturePolicyDir: dir}
	pod := func(ns string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: ns}}
	}
	for _, tc := range []struct {
		rt   Runtime
		sc   *runtimeapi.PodSandboxConfig
		want string
		bad  bool
	}{
		{crio, pod("strict"), strict, false},
		{crio, pod("other"), "", false},
		{crio, nil, "", false},
		{crio, pod(""), "", false},
		{crio, pod("../strict"), "", true},
		{crio, pod("Strict"), "", true},
		{crio, pod("-x"), "", true},
		{Runtime{SignaturePolicyDir: dir}, pod("strict"), "", false},
	} {
		got, err := tc.rt.namespacePolicy(tc.sc)
		if tc.bad {
			if failure.CodeOf(err) != failure.Usage || got != "" {
				t.Errorf("%v: %q %v; want a usage error and no path", tc.sc, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %v: %q %v; want %q", tc.rt.name(), tc.sc, got, err, tc.want)
		}
	}
}

// containerd's snapshotterFromPodSandboxConfig: only for a request with a
// sandbox_config, the handler of ImageSpec.runtime_handler, else of the
// sandbox's runtime-handler annotation, picks its own snapshotter; anything
// else is the CRI's (""). CRI-O has none.
func TestHandlerSnapshotter(t *testing.T) {
	ctrd := Runtime{Snapshotters: map[string]string{"kata": "devmapper"}}
	sb := &runtimeapi.PodSandboxConfig{}
	annotated := &runtimeapi.PodSandboxConfig{Annotations: map[string]string{runtimeHandlerAnnotation: "kata"}}
	for _, tc := range []struct {
		rt   Runtime
		req  *runtimeapi.PullImageRequest
		want string
	}{
		{ctrd, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x", RuntimeHandler: "kata"}, SandboxConfig: sb}, "devmapper"},
		{ctrd, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}, SandboxConfig: annotated}, "devmapper"},
		{ctrd, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x", RuntimeHandler: "runc"}, SandboxConfig: annotated}, ""},
		{ctrd, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x", RuntimeHandler: "kata"}}, ""},
		{Runtime{Name: RuntimeCRIO, Snapshotters: ctrd.Snapshotters}, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x", RuntimeHandler: "kata"}, SandboxConfig: sb}, ""},
	} {
		if got := tc.rt.handlerSnapshotter(tc.req); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.rt.name(), tc.req, got, tc.want)
		}
	}
}
