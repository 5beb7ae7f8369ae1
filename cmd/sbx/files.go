package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

func filesPath(id, p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return "/api/v1/sandboxes/" + url.PathEscape(id) + "/files/" + strings.Join(parts, "/")
}

func runFiles(ctx context.Context, c *apiClient, fs *flag.FlagSet, args []string, finish func() error) error {
	if len(args) == 0 {
		return errors.New("usage: sbx files ls|get|put|rm ID PATH")
	}
	verb := args[0]
	recursive := fs.Bool("recursive", false, "rm: delete a folder and everything in it")
	if err := parse(fs, args[1:], finish); err != nil {
		return err
	}
	id, err := arg(fs, 0, "ID")
	if err != nil {
		return err
	}
	p := fs.Arg(1)
	switch verb {
	case "ls":
		var out struct {
			Entries []struct {
				Name  string `json:"name"`
				Size  int64  `json:"size"`
				IsDir bool   `json:"is_dir"`
			} `json:"entries"`
		}
		if err := c.json(ctx, http.MethodGet, filesPath(id, p), nil, &out); err != nil {
			return err
		}
		for _, e := range out.Entries {
			suffix := ""
			if e.IsDir {
				suffix = "/"
			}
			fmt.Printf("%12d  %s%s\n", e.Size, e.Name, suffix)
		}
		return nil
	case "get":
		if p == "" {
			return errors.New("usage: sbx files get ID PATH [DEST]")
		}
		resp, err := c.do(ctx, http.MethodGet, filesPath(id, p), nil, "")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var dst io.Writer = os.Stdout
		if d := fs.Arg(2); d != "" && d != "-" {
			f, err := os.Create(d)
			if err != nil {
				return err
			}
			defer f.Close()
			dst = f
		}
		_, err = io.Copy(dst, resp.Body)
		return err
	case "put":
		if p == "" {
			return errors.New("usage: sbx files put ID PATH [SRC]")
		}
		var src io.Reader = os.Stdin
		if s := fs.Arg(2); s != "" && s != "-" {
			f, err := os.Open(s)
			if err != nil {
				return err
			}
			defer f.Close()
			src = f
		}
		resp, err := c.do(ctx, http.MethodPut, filesPath(id, p), src, "application/octet-stream")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(os.Stdout, resp.Body)
		return err
	case "rm":
		if p == "" {
			return errors.New("usage: sbx files rm ID PATH [--recursive]")
		}
		path := filesPath(id, p)
		if *recursive {
			path += "?recursive=true"
		}
		resp, err := c.do(ctx, http.MethodDelete, path, nil, "")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	return fmt.Errorf("unknown files command %q", verb)
}
