package sandboxinit

import "github.com/sbxedge/sbx/internal/sshdconfig"

// SSHDConfig is a sandbox's sshd_config (package sshdconfig, which links
// no init).
type SSHDConfig = sshdconfig.Config
