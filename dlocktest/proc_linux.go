package dlocktest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server if the test process dies
// first, so that a crashed test leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
