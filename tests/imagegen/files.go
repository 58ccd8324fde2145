package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// FileSpec copies the host file Host into the image at Path (-file HOST:PATH).
type FileSpec struct {
	Host string
	Path string
}

// SymlinkSpec is a symlink at Path pointing to Target (-symlink PATH=TARGET).
type SymlinkSpec struct {
	Path   string
	Target string
}

// fileList is a repeatable -file flag.
type fileList struct{ v *[]FileSpec }

func (f fileList) String() string { return "" }

func (f fileList) Set(s string) error {
	host, p, ok := strings.Cut(s, ":")
	if !ok || host == "" || p == "" {
		return fmt.Errorf("want HOST:PATH, got %q", s)
	}
	*f.v = append(*f.v, FileSpec{Host: host, Path: p})
	return nil
}

// symlinkList is a repeatable -symlink flag.
type symlinkList struct{ v *[]SymlinkSpec }

func (f symlinkList) String() string { return "" }

func (f symlinkList) Set(s string) error {
	p, target, ok := strings.Cut(s, "=")
	if !ok || p == "" || target == "" {
		return fmt.Errorf("want PATH=TARGET, got %q", s)
	}
	*f.v = append(*f.v, SymlinkSpec{Path: p, Target: target})
	return nil
}

// cmdFlag is -cmd, a JSON array of strings.
type cmdFlag struct{ v *[]string }

func (f cmdFlag) String() string { return "" }

func (f cmdFlag) Set(s string) error {
	var c []string
	if err := json.Unmarshal([]byte(s), &c); err != nil || len(c) == 0 {
		return fmt.Errorf("want a non-empty JSON array of strings, got %q", s)
	}
	*f.v = c
	return nil
}

// cleanImagePath turns an image path into a relative tar name ("bin/sh").
func cleanImagePath(p string) (string, error) {
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" || c == "." {
		return "", fmt.Errorf("bad image path %q", p)
	}
	return c, nil
}

// writeFilesLayer writes the layer of -file and -symlink entries (shared by
// every platform): parent directories first (0755), then the files (the host
// file's permission bits, content read from the host) and the symlinks, in
// flag order, with the fixed mtime and uid/gid 0.
func (g *generator) writeFilesLayer() (_ Descriptor, diffID string, err error) {
	lf, err := g.newLayerFile()
	if err != nil {
		return Descriptor{}, "", err
	}
	defer lf.discard()
	tw := lf.tw

	seenDir := map[string]bool{}
	mkParents := func(name string) error {
		var parts []string
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, d := range parts {
			if seenDir[d] {
				continue
			}
			seenDir[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: fixedTime, Format: tar.FormatUSTAR}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, fs := range g.o.Files {
		name, err := cleanImagePath(fs.Path)
		if err != nil {
			return Descriptor{}, "", err
		}
		if err := mkParents(name); err != nil {
			return Descriptor{}, "", err
		}
		hf, err := os.Open(fs.Host)
		if err != nil {
			return Descriptor{}, "", err
		}
		st, err := hf.Stat()
		if err != nil || !st.Mode().IsRegular() {
			hf.Close()
			if err == nil {
				err = fmt.Errorf("-file %s: not a regular file", fs.Host)
			}
			return Descriptor{}, "", err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: fixedTime, Format: tar.FormatUSTAR}); err != nil {
			hf.Close()
			return Descriptor{}, "", err
		}
		_, err = io.Copy(tw, hf)
		hf.Close()
		if err != nil {
			return Descriptor{}, "", err
		}
	}
	for _, sl := range g.o.Symlinks {
		name, err := cleanImagePath(sl.Path)
		if err != nil {
			return Descriptor{}, "", err
		}
		if err := mkParents(name); err != nil {
			return Descriptor{}, "", err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: sl.Target, Mode: 0o777, ModTime: fixedTime, Format: tar.FormatUSTAR}); err != nil {
			return Descriptor{}, "", err
		}
	}
	return lf.finish(g.blobDir)
}
