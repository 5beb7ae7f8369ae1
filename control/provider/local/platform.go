package local

// Serves reports the platforms a local sandbox can be: this machine's,
// which is never macOS under the local provider (sbx dev runs macOS
// sandboxes through the tart provider, see control/provider/platform).
func (l *Local) Serves(platform string) bool { return platform != "macos" }
