package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/policy"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

const snapMain = `unqualified-search-registries = ["snap.example"]
credential-helpers = ["containers-auth.json"]
[[registry]]
prefix = "snap.example"
location = "snap.example"
[[registry.mirror]]
location = "mirror.snap.example"
`

const snapDropIn = `[[registry]]
prefix = "dropin.example"
location = "dropin.example"
[[registry.mirror]]
location = "mirror.dropin.example"
`

// swapForFIFO replaces path by a FIFO, as a user owning its directory can
// after root checked it (issue 22 review 3, finding 5); the cleanup opens
// it for writing so that a reader stuck in open (the bug) returns.
func swapForFIFO(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
}

// guarded runs fn and fails the test if it has not returned by the test's
// hang guard (a FIFO open blocks forever: no timing is measured).
func guarded(t *testing.T, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s: still blocked after the hang guard: it reads the caller's path (now a FIFO), not the snapshot", what)
	}
}

// After the check, containers/image reads the snapshot of the checked
// bytes: replacing the caller's registries.conf and its drop-in by FIFOs
// blocks nothing and changes nothing (short names, endpoints, credential
// helpers, the registries.conf rendered for the child).
func TestRegistriesConfSnapshotOutlivesSwap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the snapshot's private filesystem needs root")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	dropDir := filepath.Join(dir, "registries.conf.d")
	dropIn := filepath.Join(dropDir, "10-x.conf")
	if err := os.WriteFile(conf, []byte(snapMain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dropDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte(snapDropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshotRegistriesConf(&types.SystemContext{SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: dropDir})
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	swapForFIFO(t, conf)
	swapForFIFO(t, dropIn)

	sys := snap.sys(conf)
	guarded(t, "the snapshot's main file", func() {
		if b, err := os.ReadFile(sys.SystemRegistriesConfPath); err != nil || string(b) != snapMain {
			t.Errorf("snapshot main file: %q, %v; want the checked bytes", b, err)
		}
	})
	guarded(t, "resolveImage", func() {
		named, _, err := resolveImage("x", snap, sys)
		if err != nil || named.String() != "snap.example/x:latest" {
			t.Errorf("short name: %v, %v; want snap.example/x:latest", named, err)
		}
	})
	guarded(t, "keyring", func() {
		l := policy.Defaults()
		r, err := hosts.New(hostsConfig(l, conf, snap))
		if err != nil {
			t.Errorf("hosts: %v", err)
			return
		}
		kc, _ := keyringConfig(l, Inputs{Env: auth.Env{Home: t.TempDir()}, Explain: true})
		if _, err := auth.NewKeyring(kc, r); err != nil {
			t.Errorf("keyring: %v", err)
			return
		}
		eps, err := r.Endpoints("dropin.example/a/b:v1")
		if err != nil || len(eps) != 2 || eps[0].Host != "mirror.dropin.example" {
			t.Errorf("drop-in endpoints: %+v, %v; want the drop-in's mirror first", eps, err)
		}
	})
	guarded(t, "CredentialHelpers", func() {
		h, err := sysregistriesv2.CredentialHelpers(sys)
		if err != nil || len(h) != 1 || h[0] != sysregistriesv2.AuthenticationFileHelper {
			t.Errorf("credential helpers %v, %v", h, err)
		}
	})
}

// A plan's registries.conf for the child is rendered from the snapshot:
// the same bytes before and after the caller's file became a FIFO.
func TestMaterialRegistriesConfFromSnapshot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the snapshot's private filesystem needs root")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, []byte(snapMain), 0o644); err != nil {
		t.Fatal(err)
	}
	l := policy.Defaults()
	if err := l.Set("--registries-conf", "pull.registries_conf", policy.String, conf); err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(l, Inputs{Image: "snap.example/a:v1", Dest: "oci:" + filepath.Join(t.TempDir(), "d"), Env: auth.Env{Home: t.TempDir()}, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before, err := p.LoadMaterial()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(before.RegistriesConf, []byte("mirror.snap.example")) {
		t.Fatalf("the child's registries.conf lacks the mirror:\n%s", before.RegistriesConf)
	}
	swapForFIFO(t, conf)
	guarded(t, "LoadMaterial", func() {
		after, err := p.LoadMaterial()
		if err != nil {
			t.Errorf("after the swap: %v", err)
		} else if !bytes.Equal(after.RegistriesConf, before.RegistriesConf) {
			t.Errorf("after the swap, registries.conf\n%s\nwant\n%s", after.RegistriesConf, before.RegistriesConf)
		}
	})
}

// A plan's parsed registries.conf goes with the plan: containers/image
// caches each by path for the life of the process, and every snapshot's
// paths are new, so a long-lived `pullhelper cri` kept every pull's (here
// about 470 KiB a plan before Close dropped them).
func TestClosedPlansLeaveNoParsedRegistriesConf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the snapshot's private filesystem needs root")
	}
	var b strings.Builder
	b.WriteString("[aliases]\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "\"alias%d\" = \"snap.example/org/image-%d\"\n", i, i)
	}
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	one := func() {
		l := policy.Defaults()
		if err := l.Set("--registries-conf", "pull.registries_conf", policy.String, conf); err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(l, Inputs{Image: "alias7", Dest: "oci:" + filepath.Join(t.TempDir(), "d"), Env: auth.Env{Home: t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Reference != "snap.example/org/image-7:latest" {
			t.Fatalf("the alias resolved to %s", p.Reference)
		}
		if _, err := p.LoadMaterial(); err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	one() // what the first plan loads once (package state) is not counted
	const n = 20
	h0 := heap()
	for range n {
		one()
	}
	if grown := int64(heap()) - int64(h0); grown > 2<<20 {
		t.Fatalf("the heap grew by %d KiB over %d closed plans (%d KiB a plan): their parsed registries.conf is still cached", grown>>10, n, grown/n>>10)
	}
}
