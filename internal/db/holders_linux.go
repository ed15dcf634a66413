//go:build linux

package db

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// othersHold reports whether another process has the store open. Every
// SQLite connection holds a read lock on byte 128 of the -shm file while
// it is open (the unix VFS's DMS lock), and Linux lists every process's
// locks in /proc/locks. Anything unknown (no -shm file, no /proc/locks)
// counts as no.
func othersHold(dbPath string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dbPath+"-shm", &st); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	file := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	me := strconv.Itoa(os.Getpid())
	for _, line := range strings.Split(string(b), "\n") {
		// "1: POSIX  ADVISORY  READ 25022 00:1b:713169 128 128"; a
		// waiter's line has "->" after the number. The pid comes right
		// before the file.
		f := strings.Fields(line)
		for i := 1; i < len(f); i++ {
			if f[i] == file && f[i-1] != me {
				return true
			}
		}
	}
	return false
}
