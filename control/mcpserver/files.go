package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

type fileArgs struct {
	sandboxArgs
	Path string `json:"path"`
}

// fileContent is read_sandbox_file's structured result.
type fileContent struct {
	Path     string `json:"path"`
	Size     int    `json:"size"`
	MimeType string `json:"mime_type"`
	Encoding string `json:"encoding"`
	Content  string `json:"content"`
}

func (t *tools) tooLarge(what string, size int64, method string) error {
	return &toolErr{status: http.StatusRequestEntityTooLarge, code: "file_too_large",
		detail: fmt.Sprintf("%s is %d bytes, more than the %d a tool call carries; use the REST API instead: %s "+
			"(sbx files get/put does)", what, size, t.cfg.MaxFileBytes, restPath(method, "/api/v1/sandboxes/{id}/files/{path}"))}
}

func (t *tools) readFile(ctx context.Context, req *mcp.CallToolRequest, args fileArgs, auth apiclient.RequestEditorFn) (any, error) {
	resp, err := t.api.ReadSandboxFile(ctx, args.SandboxID, args.Path, nil, auth)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, apiclient.Check(resp, b)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil, &toolErr{status: http.StatusBadRequest, code: "is_a_folder",
			detail: fmt.Sprintf("%q is a folder; list it with list_sandbox_files", args.Path)}
	}
	if resp.ContentLength > t.cfg.MaxFileBytes {
		return nil, t.tooLarge(fmt.Sprintf("%q", args.Path), resp.ContentLength, "GET")
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", args.Path, err)
	}
	if int64(len(data)) > t.cfg.MaxFileBytes {
		return nil, t.tooLarge(fmt.Sprintf("%q", args.Path), int64(len(data)), "GET")
	}
	fc := fileContent{Path: args.Path, Size: len(data), MimeType: mimeType(args.Path, data)}
	var content mcp.Content
	switch {
	case utf8.Valid(data) && !strings.HasPrefix(fc.MimeType, "image/"):
		fc.Encoding, fc.Content = "utf-8", string(data)
		content = &mcp.TextContent{Text: fc.Content}
	case strings.HasPrefix(fc.MimeType, "image/"):
		fc.Encoding, fc.Content = "base64", base64.StdEncoding.EncodeToString(data)
		content = &mcp.ImageContent{Data: data, MIMEType: fc.MimeType}
	default:
		fc.Encoding, fc.Content = "base64", base64.StdEncoding.EncodeToString(data)
		content = &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "sbx://sandboxes/" + args.SandboxID + "/files/" + strings.TrimPrefix(args.Path, "/"), MIMEType: fc.MimeType, Blob: data}}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{content}, StructuredContent: fc}, nil
}

// mimeType names content by its file name, or else by sniffing it.
func mimeType(name string, data []byte) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return http.DetectContentType(data)
}

func (t *tools) writeFile(ctx context.Context, req *mcp.CallToolRequest, args struct {
	fileArgs
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	MimeType string `json:"mime_type"`
}, auth apiclient.RequestEditorFn) (any, error) {
	data := []byte(args.Content)
	switch args.Encoding {
	case "", "utf-8":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(args.Content)
		if err != nil {
			return nil, &argsError{fmt.Errorf("content is not valid base64: %w", err)}
		}
		data = b
	default:
		return nil, &argsError{fmt.Errorf(`encoding %q: want "utf-8" or "base64"`, args.Encoding)}
	}
	if int64(len(data)) > t.cfg.MaxFileBytes {
		return nil, t.tooLarge("the content", int64(len(data)), "PUT")
	}
	r, err := apiclient.Result(t.api.WriteSandboxFileWithBodyWithResponse(ctx, args.SandboxID, args.Path, nil,
		"application/octet-stream", bytes.NewReader(data), auth))
	if err != nil {
		return nil, err
	}
	out := fileWritten{Path: args.Path, Size: int64(len(data)), MimeType: args.MimeType}
	if r.JSON201 != nil {
		out.Path, out.Size = r.JSON201.Path, int64(r.JSON201.Size)
	}
	return out, nil
}

// fileWritten is write_sandbox_file's result.
type fileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// MimeType echoes the call's mime_type, when it named one.
	MimeType string `json:"mime_type,omitempty"`
}

func (t *tools) listFiles(ctx context.Context, req *mcp.CallToolRequest, args fileArgs, auth apiclient.RequestEditorFn) (any, error) {
	// The raw call: a file's bytes are not read when a folder was wanted.
	resp, err := t.api.ReadSandboxFile(ctx, args.SandboxID, args.Path, nil, auth)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil, &toolErr{status: http.StatusBadRequest, code: "not_a_folder",
			detail: fmt.Sprintf("%q is a file; read it with read_sandbox_file", args.Path)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode >= 400 {
		return nil, apiclient.Check(resp, b)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", args.Path, err)
	}
	return json.RawMessage(b), nil
}
