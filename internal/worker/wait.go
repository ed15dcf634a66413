package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// wait waits for the run's process to end and reaps it. With a pidfd the
// wait is the runtime's poller's: no thread sits blocked in waitid for
// each live run (at 2000 runs a second, those threads and the scheduler's
// hand-offs around them cost more than the runs). Without one (kernels
// before 5.3) it is exec.Cmd.Wait.
func (r *run) wait() {
	defer r.reaped.Store(true)
	defer func() { _ = r.cmd.Process.Release() }()
	if r.pidfd >= 0 {
		if err := syscall.SetNonblock(r.pidfd, true); err == nil {
			f := os.NewFile(uintptr(r.pidfd), "pidfd")
			r.pidfd = -1
			defer f.Close()
			if rc, err := f.SyscallConn(); err == nil {
				pid := r.pid
				var werr error
				err := rc.Read(func(uintptr) bool {
					var got int
					for {
						got, werr = syscall.Wait4(pid, &r.ws, syscall.WNOHANG, nil)
						if !errors.Is(werr, syscall.EINTR) {
							break
						}
					}
					if got == pid {
						// Reaped: from now on the pid may name another
						// process, and exited() must not ask about it.
						r.reaped.Store(true)
						return true
					}
					return werr != nil
				})
				if err == nil && werr == nil {
					return
				}
				if werr == nil {
					werr = err
				}
				// ECHILD: reaped elsewhere (cannot happen: nothing else
				// waits for it); report it as a wait failure.
				r.waitErr = fmt.Errorf("wait: %w", werr)
				return
			}
		}
		r.closePidfd()
	}
	err := r.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.ws = 0
	case errors.As(err, &ee):
		r.ws, _ = ee.Sys().(syscall.WaitStatus)
	default:
		r.waitErr = err
	}
}

// closePidfd closes the pidfd unless wait took it.
func (r *run) closePidfd() {
	if r.pidfd >= 0 {
		_ = syscall.Close(r.pidfd)
		r.pidfd = -1
	}
}

// exited reports, without reaping it, whether the run's process has
// already ended (or been reaped by its waiting goroutine).
func (r *run) exited() bool {
	if r.reaped.Load() {
		return true
	}
	if r.pid == 0 {
		return false
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, r.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD)
	}
	// Linux zeroes info when no child is waitable; SIGCHLD marks one that is.
	return info.Signo == int32(unix.SIGCHLD)
}
