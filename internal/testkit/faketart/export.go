package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// export is `tart export NAME PATH`: the VM's directory as one archive
// (tart writes a .tvm; the fake a tar of the directory, the suspended
// memory included).
func (h *home) export(args []string) int {
	pos, err := parse(flag.NewFlagSet("export", flag.ContinueOnError), args)
	if err != nil || len(pos) != 2 {
		return usage(errors.New("export takes <name> <path>"))
	}
	dir := h.vmDir(pos[0])
	if !validName(pos[0]) || !exists(filepath.Join(dir, configFile)) {
		return fail("the specified VM \"%s\" does not exist", pos[0])
	}
	if _, ok := runPID(dir); ok {
		return fail("VM \"%s\" is running", pos[0])
	}
	f, err := os.Create(pos[1])
	if err != nil {
		return fail("%v", err)
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || rel == pidFile || rel == bootedFile || !(info.IsDir() || info.Mode().IsRegular()) {
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(pos[1])
		return fail("%v", err)
	}
	return 0
}

// importVM is `tart import PATH NAME`.
func (h *home) importVM(args []string) int {
	pos, err := parse(flag.NewFlagSet("import", flag.ContinueOnError), args)
	if err != nil || len(pos) != 2 || !validName(pos[1]) {
		return usage(errors.New("import takes <path> <name>"))
	}
	if exists(h.vmDir(pos[1])) {
		return fail("VM \"%s\" already exists", pos[1])
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	tmp := filepath.Join(h.root, "vms", fmt.Sprintf(".import-%s-%d", pos[1], os.Getpid()))
	if err := untar(tar.NewReader(f), tmp); err != nil {
		os.RemoveAll(tmp)
		return fail("%v", err)
	}
	if err := os.Rename(tmp, h.vmDir(pos[1])); err != nil {
		os.RemoveAll(tmp)
		return fail("%v", err)
	}
	return 0
}

func untar(tr *tar.Reader, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) || strings.Contains(hdr.Name, "\x00") {
			return fmt.Errorf("archive entry %q leaves the VM", hdr.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(hdr.Mode).Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}
