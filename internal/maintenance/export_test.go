package maintenance

import (
	"time"

	"github.com/cq-dev/cq/internal/procs"
)

// KillRunGroup SIGKILLs run runID's process group pgid, guarded against
// pid reuse, as a pass does for a lost run of this host.
func KillRunGroup(pgid int, runID string, claimed, started time.Time) bool {
	return procs.KillGroup(pgid, runID, claimed, started)
}
