package dest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// storeConf writes a storage.conf for a vfs store under dir with extra
// lines, and returns it and the DEST naming that store.
func storeConf(t *testing.T, dir, extra string) (conf, raw string) {
	t.Helper()
	graph, run := filepath.Join(dir, "graph"), filepath.Join(dir, "run")
	conf = filepath.Join(dir, "storage.conf")
	must(t, os.WriteFile(conf, []byte(fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n%s", run, graph, extra)), 0o644))
	return conf, fmt.Sprintf("containers-storage:[vfs@%s+%s]registry.example/x:1", graph, run)
}

// userStore is a directory uid 65534 made, as the attack of review 2's
// finding 1: vfs-images/images.lock a symbolic link to a root file
// (victim, returned with its content).
func userStore(t *testing.T, dir string) (store, victim string, content []byte) {
	t.Helper()
	victim = filepath.Join(dir, "victim")
	content = []byte("root's secret\n")
	must(t, os.WriteFile(victim, content, 0o600))
	store = filepath.Join(dir, "user", "imgstore")
	must(t, os.MkdirAll(filepath.Join(store, "vfs-images"), 0o755))
	must(t, os.Symlink(victim, filepath.Join(store, "vfs-images", "images.lock")))
	for _, p := range []string{store, filepath.Join(store, "vfs-images"), filepath.Join(store, "vfs-images", "images.lock")} {
		must(t, os.Lchown(p, 65534, 65534))
	}
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chmod(filepath.Join(dir, "user"), 0o755))
	return store, victim, content
}

func stageStore(t *testing.T, conf, raw string, o dest.StageOptions) error {
	t.Helper()
	d, err := dest.ParseWith(raw, dest.ParseOptions{StorageConf: conf})
	must(t, err)
	st, err := d.Stage(o)
	if err == nil {
		st.Remove()
	}
	return err
}

// storage.conf's imagestore (the store's read-write image store, which
// containers/storage MkdirAll's and opens images.lock in with O_CREAT,
// following links) is checked as the roots are: a user's directory is
// refused, naming the setting, and the root file its link names is not
// written.
func TestStorageStageRefusesUserImageStore(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	store, victim, content := userStore(t, dir)
	conf, raw := storeConf(t, dir, fmt.Sprintf("imagestore = %q\n", store))
	err := stageStore(t, conf, raw, dest.StageOptions{Locks: testLocks})
	if failure.CodeOf(err) != failure.Destination || !strings.Contains(fmt.Sprint(err), "image store "+store) ||
		!strings.Contains(fmt.Sprint(err), "uid 65534") || !strings.Contains(fmt.Sprint(err), "imagestore in storage.conf") {
		t.Errorf("Stage: %v, want a destination error naming the image store, its owner and the setting", err)
	}
	if got, _ := os.ReadFile(victim); !bytes.Equal(got, content) {
		t.Errorf("the root file the user's images.lock links to was written: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "graph")); err == nil {
		t.Errorf("the refused Stage created the graph root")
	}
}

// A root-owned imagestore is created (root 0700) and used.
func TestStorageStageCreatesImageStore(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	is := filepath.Join(dir, "images", "store")
	conf, raw := storeConf(t, dir, fmt.Sprintf("imagestore = %q\n", is))
	must(t, stageStore(t, conf, raw, dest.StageOptions{Locks: testLocks}))
	fi, err := os.Stat(filepath.Join(is, "vfs-images"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("the image store was not used: %v", err)
	}
}

// The additional (read-only) image and layer stores, from storage.conf or
// the DEST's driver options, are checked without being created: a user's
// is refused, a missing one too, naming the setting; an unclean or
// relative path is refused; mount_program must be root's.
func TestStorageStageChecksAdditionalStores(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	store, victim, content := userStore(t, dir)
	missing := filepath.Join(dir, "nothing-here")
	prog := filepath.Join(dir, "user", "mount-helper")
	must(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(prog, 65534, 65534))
	for _, c := range []struct {
		name, extra, opts, want string
	}{
		{"user's additionalimagestores", fmt.Sprintf("[storage.options]\nadditionalimagestores = [%q]\n", store), "", "additional image store " + store + " is owned by uid 65534"},
		{"missing additionalimagestores", fmt.Sprintf("[storage.options]\nadditionalimagestores = [%q]\n", missing), "", "a read-only store must exist (set additionalimagestores in storage.conf"},
		{"user's vfs.imagestore in DEST", "", "vfs.imagestore=" + store, "additional image store " + store},
		{"relative imagestore option", "", "imagestore=rel/x", `additional image store "rel/x": must be a clean absolute path`},
		{"unclean imagestore", fmt.Sprintf("imagestore = %q\n", dir+"/a/../b"), "", "must be a clean absolute path (set imagestore in storage.conf)"},
		{"user's additionallayerstores", fmt.Sprintf("[storage.options]\nadditionallayerstores = [\"%s:ref\"]\n", store), "", "additional layer store " + store},
		{"user's mount_program", fmt.Sprintf("[storage.options.overlay]\nmount_program = %q\n", prog), "", "mount program " + prog + ": owned by uid 65534"},
	} {
		conf, raw := storeConf(t, dir, c.extra)
		if c.opts != "" {
			raw = strings.Replace(raw, "]registry", ":"+c.opts+"]registry", 1)
		}
		err := stageStore(t, conf, raw, dest.StageOptions{Locks: testLocks})
		if failure.CodeOf(err) != failure.Destination || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: Stage: %v, want a destination error with %q", c.name, err, c.want)
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("%s: the missing read-only store was created", c.name)
		}
	}
	if got, _ := os.ReadFile(victim); !bytes.Equal(got, content) {
		t.Errorf("the root file the user's images.lock links to was written: %q", got)
	}
}

// done is a context already ended with cause.
func done(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}

// Stage of a containers-storage DEST ends with its context (SIGTERM, the
// --timeout deadline) with that context's error, not after --lock-timeout.
func TestStorageStageEndsWithContext(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	conf, raw := storeConf(t, dir, "")
	err := stageStore(t, conf, raw, dest.StageOptions{Locks: testLocks, Ctx: done(failure.New(failure.Network, "pull timed out after 5s (--timeout)")), LockTimeout: time.Hour})
	if failure.CodeOf(err) != failure.Network || !strings.Contains(fmt.Sprint(err), "timed out after 5s") {
		t.Errorf("Stage with an ended context: %v, want the deadline's network error", err)
	}
}

// containerd's Stage ends with its context, not after the 10 s dial bound
// as "cannot reach containerd".
func TestContainerdStageEndsWithContext(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "c.sock")
	l, err := net.Listen("unix", sock) // accepts, never answers
	must(t, err)
	defer l.Close()
	d, err := dest.Parse("containerd:registry.example/x:1")
	must(t, err)
	_, _, err = dest.ConfigureContainerd(d, dest.ContainerdSettings{Staging: filepath.Join(dir, "staging"), Address: sock})
	must(t, err)
	_, err = d.Stage(dest.StageOptions{Locks: testLocks, Ctx: done(errors.New("interrupted"))})
	if failure.CodeOf(err) != failure.Interrupted {
		t.Errorf("Stage with an ended context: %v, want interrupted", err)
	}
}
