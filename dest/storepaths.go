package dest

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/safefs"
	storagetypes "go.podman.io/storage/types"
	"golang.org/x/sys/unix"
)

// storePath is a directory containers/storage is given (from DEST or
// storage.conf) and opens as root: its lock files with O_CREAT, following
// symbolic links, its JSON records, its layers.
type storePath struct {
	path string
	what string // in errors: "graph root"
	fix  string // the setting that names it
	// writable: the store creates it (MkdirAll) and writes there;
	// prepareRoot creates it. Otherwise (a read-only additional store) it
	// is checked, never created, and must exist.
	writable bool
}

// storePaths are every path containers/storage is given: the graph and
// run roots, imagestore (the store's read-write image store), every
// additional image store (additionalimagestores in storage.conf, the
// driver option [DRIVER.]imagestore= or overlay's additionalimagestore=,
// comma-separated) and additional layer store (additionallayerstores,
// [overlay.]additionallayerstore=PATH[:ref]). rootless_storage_path is not
// among them: containers/storage uses it only for a rootless caller, and
// then as the graph root. overlay's mount_program is checked by
// checkMountProgram. A path that is not absolute and clean is refused
// (containers/storage uses some of them as written, relative to the
// working directory or through "..").
func storePaths(ss *StoreSpec, so *storagetypes.StoreOptions) ([]storePath, error) {
	out := []storePath{
		{ss.GraphRoot, "graph root", "set GRAPHROOT in DEST or graphroot in storage.conf", true},
		{ss.RunRoot, "run root", "set RUNROOT in DEST or runroot in storage.conf", true},
	}
	if so == nil {
		return out, nil
	}
	if is := so.ImageStore; is != "" {
		out = append(out, storePath{is, "image store", "set imagestore in storage.conf", true})
	}
	for _, o := range so.GraphDriverOptions {
		name, val := driverOption(o)
		var what, fix string
		switch name {
		case "imagestore", "additionalimagestore":
			what, fix = "additional image store", "set additionalimagestores in storage.conf, or the driver option "+name+"= in DEST"
		case "additionallayerstore":
			what, fix = "additional layer store", "set additionallayerstores in storage.conf, or the driver option "+name+"= in DEST"
		default:
			continue
		}
		for _, p := range strings.Split(val, ",") {
			if name == "additionallayerstore" {
				p, _, _ = strings.Cut(p, ":")
			}
			out = append(out, storePath{p, what, fix, false})
		}
	}
	for _, p := range out[2:] { // the roots: absolute (parseStorage), used cleaned
		if !filepath.IsAbs(p.path) || filepath.Clean(p.path) != p.path {
			return nil, fmt.Errorf("%s %q: must be a clean absolute path (%s)", p.what, p.path, p.fix)
		}
	}
	return out, nil
}

// driverOption splits a graph driver option [DRIVER.]KEY=VALUE as
// containers/storage does (the key case-insensitive, both sides trimmed):
// the key without its driver prefix, and the value.
func driverOption(o string) (name, val string) {
	k, v, _ := strings.Cut(o, "=")
	k = strings.ToLower(strings.TrimSpace(k))
	if _, n, ok := strings.Cut(k, "."); ok {
		k = n
	}
	return k, strings.TrimSpace(v)
}

// checkStorePaths checks every storePaths entry, and mount_program,
// before containers/storage touches any: the read-only stores as roots
// that must exist (prepareRoot without creating), then the writable ones
// created by prepareRoot (all checked before any is created).
func checkStorePaths(ss *StoreSpec, so *storagetypes.StoreOptions) error {
	paths, err := storePaths(ss, so)
	if err != nil {
		return err
	}
	if err := checkMountProgram(so); err != nil {
		return err
	}
	for _, create := range []bool{false, true} {
		for _, p := range paths {
			if !p.writable && create {
				continue
			}
			if err := prepareRoot(p.path, p.what, true, create); err != nil {
				return fmt.Errorf("%v (%s)", err, p.fix)
			}
			if !p.writable {
				var st unix.Stat_t
				if err := unix.Stat(p.path, &st); err != nil {
					return fmt.Errorf("%s %s: %s; a read-only store must exist (%s)", p.what, p.path, safefs.ErrnoText(err), p.fix)
				}
			}
		}
	}
	return nil
}

// checkMountProgram: overlay's mount_program (which the store runs as
// root to mount layers) must be a regular file of root's, not writable by
// group or others, in directories nobody but root can change.
func checkMountProgram(so *storagetypes.StoreOptions) error {
	if so == nil {
		return nil
	}
	const fix = "set mount_program in storage.conf, or the driver option mount_program= in DEST"
	for _, o := range so.GraphDriverOptions {
		name, p := driverOption(o)
		if name != "mount_program" {
			continue
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("mount program %q: must be a clean absolute path (%s)", p, fix)
		}
		dir := filepath.Dir(p)
		dfd, err := openAncestors(dir, false)
		if err != nil {
			return fmt.Errorf("mount program %s: %v (%s)", p, err, fix)
		}
		dst, err := safefs.Fstat(dfd)
		if err == nil {
			err = safefs.RootOnly(dst, dir, true)
		}
		var st unix.Stat_t
		if err == nil {
			st, err = safefs.FstatAt(dfd, filepath.Base(p))
			if err != nil {
				err = fmt.Errorf("%s", safefs.ErrnoText(err))
			}
		}
		unix.Close(dfd)
		switch {
		case err != nil:
		case !safefs.IsReg(st):
			err = fmt.Errorf("not a regular file (name the program itself, not a link to it)")
		case st.Uid != 0:
			err = fmt.Errorf("owned by uid %d, not root; refusing to run it as root", st.Uid)
		case st.Mode&0o022 != 0:
			err = fmt.Errorf("writable by group or others (mode %o); refusing to run it as root", st.Mode&0o7777)
		}
		if err != nil {
			return fmt.Errorf("mount program %s: %v (%s)", p, err, fix)
		}
	}
	return nil
}
