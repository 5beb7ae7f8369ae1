package api

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/pkg/sftp"

	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/internal/problem"
)

// filePath resolves the URL's path inside the sandbox workspace and opens
// the pooled SFTP client. It answers the request itself on failure.
func (s *Server) filePath(w http.ResponseWriter, r *http.Request) (*sftp.Client, string, bool) {
	t, err := s.target(r)
	if err != nil {
		writeError(w, r, err)
		return nil, "", false
	}
	p, err := podfiles.ResolvePath(t.Workspace, filesParam(r))
	if err != nil {
		writeError(w, r, err)
		return nil, "", false
	}
	c, err := podfiles.Client(r.Context(), s.pods, t)
	if err != nil {
		writeError(w, r, err)
		return nil, "", false
	}
	return c, p, true
}

// filesParam is the decoded path after /files/. chi matches on the raw
// path when the URL has one (RawPath is set when the escapes are not the
// default ones, as with "%2e%2e"), so that must be decoded before the
// escape check, or it would slip past as a literal name. Otherwise chi
// matched on the decoded path, and decoding again would read "a%2541"
// as "aA", another file.
func filesParam(r *http.Request) string {
	raw := chi.URLParam(r, "*")
	if r.URL.RawPath == "" {
		return raw
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "\x00invalid escape" // ResolvePath refuses NUL
	}
	return p
}

type listing struct {
	Path    string              `json:"path"`
	Entries []podfiles.FileInfo `json:"entries"`
}

// getFile streams a file, or lists a folder as JSON.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if tarred, ok := wantsTar(w, r); !ok || tarred {
		if ok {
			s.getTar(w, r)
		}
		return
	}
	c, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	fi, err := podfiles.Stat(c, p)
	if err != nil {
		writeFileError(w, r, err)
		return
	}
	if fi.IsDir {
		entries, err := podfiles.List(r.Context(), c, p)
		if err != nil {
			writeFileError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, listing{Path: filesParam(r), Entries: entries})
		return
	}
	f, fi, err := podfiles.Open(c, p)
	if err != nil {
		writeFileError(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.Header().Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
	if _, err := io.Copy(w, f); err != nil {
		// Headers are gone; all we can do is cut the response short so the
		// client sees a length mismatch instead of a silently short file.
		logger(r).WarnContext(r.Context(), "file download aborted", "err", err)
		panic(http.ErrAbortHandler)
	}
}

type putResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// putFile streams the body into the file, creating parent folders.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	if tarred, ok := wantsTar(w, r); !ok || tarred {
		if ok {
			s.putTar(w, r)
		}
		return
	}
	if filesParam(r) == "" {
		writeProblem(w, r, problem.New(http.StatusBadRequest, "invalid_path", "PUT needs a file path"))
		return
	}
	if strings.HasSuffix(filesParam(r), "/") {
		// A trailing slash names a folder; the path cleaning below would
		// drop it and write a file of that name instead.
		writeProblem(w, r, problem.New(http.StatusBadRequest, "invalid_path",
			"PUT needs a file path, not a folder's (it ends with /)"))
		return
	}
	if r.ContentLength > s.cfg.MaxFileSize {
		writeProblem(w, r, tooLarge(s.cfg.MaxFileSize))
		return
	}
	c, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxFileSize)
	n, err := podfiles.Put(r.Context(), c, p, body, 0o644)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, r, tooLarge(s.cfg.MaxFileSize))
			return
		}
		writeFileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, putResult{Path: filesParam(r), Size: n})
}

// deleteFile removes a file, or a folder (empty, or any with
// ?recursive=true).
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	if filesParam(r) == "" {
		writeProblem(w, r, problem.New(http.StatusBadRequest, "invalid_path", "refusing to delete the workspace root"))
		return
	}
	c, p, ok := s.filePath(w, r)
	if !ok {
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	if err := podfiles.Remove(r.Context(), c, p, recursive); err != nil {
		writeFileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func tooLarge(limit int64) *problem.Problem {
	return problem.New(http.StatusRequestEntityTooLarge, "file_too_large",
		"file exceeds the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}

// writeFileError maps SFTP outcomes the caller can act on.
func writeFileError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, os.ErrNotExist):
		writeProblem(w, r, problem.New(http.StatusNotFound, "file_not_found", "no such file or folder in the workspace"))
	case errors.Is(err, podfiles.ErrIsDir):
		writeProblem(w, r, problem.New(http.StatusConflict, "is_directory", "the path is a folder"))
	case errors.Is(err, podfiles.ErrDirNotEmpty):
		writeProblem(w, r, problem.New(http.StatusConflict, "directory_not_empty", "the folder is not empty; pass ?recursive=true"))
	case errors.Is(err, podfiles.ErrNoSpace):
		// The sandbox's disk, not ours: the caller can free space there.
		writeProblem(w, r, problem.New(http.StatusInsufficientStorage, "storage_full", "the sandbox's disk is full"))
	case errors.Is(err, fs.ErrPermission), errors.Is(err, os.ErrPermission):
		writeProblem(w, r, problem.New(http.StatusForbidden, "permission_denied", "permission denied inside the sandbox"))
	default:
		writeError(w, r, err)
	}
}
