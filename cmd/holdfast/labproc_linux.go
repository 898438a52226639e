package main

import (
	"os/exec"
	"syscall"
)

// childOfBroker makes a lab child process die with the broker (a broker
// killed with SIGKILL leaves no lab behind).
func childOfBroker(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lowerPriority makes the lab yield the CPU to the broker (nice 10).
func lowerPriority(pid int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, pid, 10)
}
