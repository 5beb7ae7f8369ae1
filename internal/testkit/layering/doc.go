// Package layering holds no code: its test checks that imports flow one
// way across the repository (see DESIGN.md, Layout).
package layering
