package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// runPorts is `sbx ports`: list, expose or unexpose a sandbox's preview
// ports.
//
//	sbx ports ID                                   list
//	sbx ports [--public] [--host-localhost] ID PORT expose; prints the URL
//	sbx ports --rm ID PORT                         unexpose
func runPorts(ctx context.Context, c *apiClient, fs *flag.FlagSet, args []string, finish func() error) error {
	public := fs.Bool("public", false, "anyone with the URL may open it (default: your account only)")
	localhost := fs.Bool("host-localhost", false, "send Host: localhost:PORT (for dev servers that insist)")
	rm := fs.Bool("rm", false, "stop exposing PORT")
	if err := parse(fs, args, finish); err != nil {
		return err
	}
	id, err := arg(fs, 0, "ID")
	if err != nil {
		return err
	}
	base := "/api/v1/sandboxes/" + url.PathEscape(id) + "/ports"
	if fs.NArg() < 2 {
		if *rm {
			return errors.New("usage: sbx ports --rm ID PORT")
		}
		var out struct {
			Ports []struct {
				Port       int
				URL        string
				Access     string
				HostPolicy string `json:"host_policy"`
			}
		}
		if err := c.json(ctx, http.MethodGet, base, nil, &out); err != nil {
			return err
		}
		for _, p := range out.Ports {
			fmt.Printf("%-6d %-8s %-10s %s\n", p.Port, p.Access, p.HostPolicy, p.URL)
		}
		return nil
	}
	port, err := strconv.Atoi(fs.Arg(1))
	if err != nil {
		return fmt.Errorf("PORT %q is not a number", fs.Arg(1))
	}
	if *rm {
		return c.json(ctx, http.MethodDelete, base+"/"+strconv.Itoa(port), nil, nil)
	}
	body := map[string]any{"port": port, "access": "private", "host_policy": "forward"}
	if *public {
		body["access"] = "public"
	}
	if *localhost {
		body["host_policy"] = "localhost"
	}
	var out struct{ URL string }
	if err := c.json(ctx, http.MethodPost, base, body, &out); err != nil {
		return err
	}
	fmt.Println(out.URL)
	return nil
}
