package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/problem"
)

// Folders as tar archives: GET …/files/{dir}?format=tar streams one,
// PUT with ?format=tar (or Content-Type application/x-tar) unpacks one.
// podfiles holds the rules (the single files' ones: nothing lands, and no
// symlink points, outside the workspace).

// wantsTar reports whether the request is about a folder as a tar; a
// format other than tar is answered 400 and ok is false.
func wantsTar(w http.ResponseWriter, r *http.Request) (tarred, ok bool) {
	switch f := r.URL.Query().Get("format"); f {
	case "tar":
		return true, true
	case "":
	default:
		writeProblem(w, r, badQuery("format", "must be tar (or absent)"))
		return false, false
	}
	if r.Method == http.MethodPut {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == "application/x-tar" {
			return true, true
		}
	}
	return false, true
}

// getTar streams the folder p as a tar archive.
func (s *Server) getTar(w http.ResponseWriter, r *http.Request) {
	c, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	fi, err := podfiles.Stat(c, p)
	if err != nil {
		writeFileError(w, r, err)
		return
	}
	if !fi.IsDir {
		writeProblem(w, r, problem.New(http.StatusBadRequest, "invalid_path", "?format=tar needs a folder; this is a file"))
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if err := podfiles.TarDir(r.Context(), c, p, w); err != nil {
		logger(r).WarnContext(r.Context(), "folder download aborted", "err", err)
		panic(http.ErrAbortHandler) // a cut archive, not a short one that reads as whole
	}
}

// putTar unpacks the body, a tar archive, into the folder the URL names
// (the workspace for an empty path). The archive is spooled and checked
// whole first: a refused one writes nothing.
func (s *Server) putTar(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > s.cfg.MaxFileSize {
		writeProblem(w, r, tooLarge(s.cfg.MaxFileSize))
		return
	}
	t, err := s.target(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	dir := strings.TrimSuffix(filesParam(r), "/")
	if _, err := podfiles.ResolvePath(t.Workspace, dir); err != nil {
		writeError(w, r, err)
		return
	}
	spool, err := os.CreateTemp("", "sbx-untar-*")
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	size, err := io.Copy(spool, http.MaxBytesReader(w, r.Body, s.cfg.MaxFileSize))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, r, tooLarge(s.cfg.MaxFileSize))
			return
		}
		writeError(w, r, err)
		return
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := podfiles.CheckArchive(t.Workspace, dir, spool); err != nil {
		writeTarError(w, r, err)
		return
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		writeError(w, r, err)
		return
	}
	c, err := podfiles.Client(r.Context(), s.pods, t)
	if err != nil {
		writeError(w, r, err)
		return
	}
	n, err := podfiles.Untar(r.Context(), c, t.Workspace, dir, spool, func(ctx context.Context, target, p string) error {
		res, err := s.pods.Exec(ctx, t, podssh.ExecRequest{Command: "ln", Args: []string{"-sfn", "--", target, p}, Timeout: 30 * time.Second})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("ln -s %s: exit %d: %s", p, res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		return err
	})
	if err != nil {
		writeTarError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, struct {
		putResult
		Files int `json:"files"`
	}{putResult{Path: filesParam(r), Size: size}, n})
}

func writeTarError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *podfiles.ArchiveError
	if errors.As(err, &ae) {
		p := problem.New(http.StatusUnprocessableEntity, "invalid_archive", ae.Error())
		p.Errors = []problem.FieldError{{Field: "body", Detail: ae.Error()}}
		writeProblem(w, r, p)
		return
	}
	writeFileError(w, r, err)
}
