package scripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sampleCrontab holds one line per element (line N is element N-1) and
// covers every rule of crontab-to-cq's header.
var sampleCrontab = strings.Join([]string{
	`# m h dom mon dow command`,
	``,
	`MAILTO=ops@example.com`,
	`SHELL=/bin/bash`,
	`PATH = /usr/local/bin:/usr/bin:/bin`,
	`GREETING="hello world"`,
	`  # an indented comment`,
	`QUOTE="it's"`,
	`CRON_TZ=Europe/Paris`,
	"*/5 * * * *\t  /usr/local/bin/backup --fast",
	`30 2 * * 1-5 cd "$HOME/app" && ./rotate.sh >> "$HOME/rotate.log" 2>&1`,
	`@daily echo "it's done" >>/tmp/daily.log`,
	`@reboot /usr/bin/start-agent`,
	`this line is not a job`,
	`0 0 1 * * date +\%Y-\%m-\%d > /tmp/stamp`,
	`0 12 * * * mail -s hi root%body line`,
	`61 * * * * echo minute 61`,
	`0 9 1,15 1-6/2 0 /opt/Tools/Sync_Mirror.py --all`,
	`TZ='America/New_York'`,
	`CRON_TZ=`,
	`SHELL=/bin/sh`,
	`   @hourly    ./A_Very_Long_Command_Name_That_Goes_On_And_On_And_On_Far_Beyond_Sixty_Four_Characters.sh`,
	`0 4 * * * printf "\%s|" 'a b' it\'s \\ ~ * ! $((1+1)) ` + "`uname`" + ` ; echo "$PATH"   `,
	`GREETING=bye`,
	`@weekly "$HOME/bin/weekly report"`,
	"@monthly /usr/bin/true\r",
	`15 6 * * 5-7 /usr/local/bin/weekend-job`,
}, "\n") + "\n"

// sampleOutput is what crontab-to-cq prints for sampleCrontab.
var sampleOutput = strings.Join([]string{
	`# cq schedules from a crontab: review, then run these lines`,
	`# line 3: MAILTO is not carried over: cq keeps each run's output (cq logs) instead of mailing it`,
	`# line 4: SHELL=/bin/bash is not carried over: cq runs --shell strings with /bin/sh`,
	`cq schedule add backup-10 '*/5 * * * *' --tz Europe/Paris --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell '/usr/local/bin/backup --fast'`,
	`cq schedule add cd-11 '30 2 * * 1-5' --tz Europe/Paris --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell 'cd "$HOME/app" && ./rotate.sh >> "$HOME/rotate.log" 2>&1'`,
	`cq schedule add echo-12 '@daily' --tz Europe/Paris --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell 'echo "it'\''s done" >>/tmp/daily.log'`,
	`# line 13: @reboot has no equivalent in cq schedules (skipped): @reboot /usr/bin/start-agent`,
	`# line 14: not understood (skipped): this line is not a job`,
	`cq schedule add date-15 '0 0 1 * *' --tz Europe/Paris --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell 'date +%Y-%m-%d > /tmp/stamp'`,
	`# line 16: an unescaped % (cron's stdin for the command) has no equivalent in cq (skipped): 0 12 * * * mail -s hi root%body line`,
	`# line 17: not understood (skipped): 61 * * * * echo minute 61`,
	`cq schedule add sync-mirror-py-18 '0 9 1,15 1-6/2 0' --tz Europe/Paris --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell '/opt/Tools/Sync_Mirror.py --all'`,
	`cq schedule add a-very-long-command-name-that-goes-on-and-on-and-on-far-beyon-22 '@hourly' --tz America/New_York --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell './A_Very_Long_Command_Name_That_Goes_On_And_On_And_On_Far_Beyond_Sixty_Four_Characters.sh'`,
	`cq schedule add printf-23 '0 4 * * *' --tz America/New_York --env PATH=/usr/local/bin:/usr/bin:/bin --env 'GREETING=hello world' --env 'QUOTE=it'\''s' --shell 'printf "%s|" '\''a b'\'' it\'\''s \\ ~ * ! $((1+1)) ` + "`uname`" + ` ; echo "$PATH"'`,
	`cq schedule add weekly-25 '@weekly' --tz America/New_York --env PATH=/usr/local/bin:/usr/bin:/bin --env GREETING=bye --env 'QUOTE=it'\''s' --shell '"$HOME/bin/weekly report"'`,
	`cq schedule add true-26 '@monthly' --tz America/New_York --env PATH=/usr/local/bin:/usr/bin:/bin --env GREETING=bye --env 'QUOTE=it'\''s' --shell '/usr/bin/true'`,
	`# line 27: day of week 5-7 is written 5-6,0 (Sunday as 0)`,
	`cq schedule add weekend-job-27 '15 6 * * 5-6,0' --tz America/New_York --env PATH=/usr/local/bin:/usr/bin:/bin --env GREETING=bye --env 'QUOTE=it'\''s' --shell '/usr/local/bin/weekend-job'`,
}, "\n") + "\n"

// sampleJobs is the argv each of sampleOutput's cq lines must pass, in
// order, written without any shell quoting.
var sampleJobs = func() [][]string {
	paris := []string{"--tz", "Europe/Paris", "--env", "PATH=/usr/local/bin:/usr/bin:/bin", "--env", "GREETING=hello world", "--env", "QUOTE=it's"}
	york := []string{"--tz", "America/New_York", "--env", "PATH=/usr/local/bin:/usr/bin:/bin", "--env", "GREETING=hello world", "--env", "QUOTE=it's"}
	bye := []string{"--tz", "America/New_York", "--env", "PATH=/usr/local/bin:/usr/bin:/bin", "--env", "GREETING=bye", "--env", "QUOTE=it's"}
	job := func(name, schedule string, flags []string, command string) []string {
		argv := append([]string{"schedule", "add", name, schedule}, flags...)
		return append(argv, "--shell", command)
	}
	return [][]string{
		job("backup-10", "*/5 * * * *", paris, "/usr/local/bin/backup --fast"),
		job("cd-11", "30 2 * * 1-5", paris, `cd "$HOME/app" && ./rotate.sh >> "$HOME/rotate.log" 2>&1`),
		job("echo-12", "@daily", paris, `echo "it's done" >>/tmp/daily.log`),
		job("date-15", "0 0 1 * *", paris, `date +%Y-%m-%d > /tmp/stamp`),
		job("sync-mirror-py-18", "0 9 1,15 1-6/2 0", paris, "/opt/Tools/Sync_Mirror.py --all"),
		job("a-very-long-command-name-that-goes-on-and-on-and-on-far-beyon-22", "@hourly", york,
			"./A_Very_Long_Command_Name_That_Goes_On_And_On_And_On_Far_Beyond_Sixty_Four_Characters.sh"),
		job("printf-23", "0 4 * * *", york, `printf "%s|" 'a b' it\'s \\ ~ * ! $((1+1)) `+"`uname`"+` ; echo "$PATH"`),
		job("weekly-25", "@weekly", bye, `"$HOME/bin/weekly report"`),
		job("true-26", "@monthly", bye, "/usr/bin/true"),
		job("weekend-job-27", "15 6 * * 5-6,0", bye, "/usr/local/bin/weekend-job"),
	}
}()

// convert runs crontab-to-cq with stdin and returns its stdout, stderr
// and exit code.
func convert(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("./crontab-to-cq", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("crontab-to-cq %v: %v", args, err)
	return "", "", 0
}

// writeCrontab writes text to a file of its own and returns its path.
func writeCrontab(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crontab")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// addLines returns the printed cq schedule add lines.
func addLines(out string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "cq schedule add ") {
			lines = append(lines, line)
		}
	}
	return lines
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// checkNames fails the test unless every printed name is one cq accepts.
func checkNames(t *testing.T, out string) {
	t.Helper()
	for _, line := range addLines(out) {
		name := strings.Fields(line)[3]
		if !validName.MatchString(name) {
			t.Errorf("name %q (%d characters) is not a valid schedule name", name, len(name))
		}
	}
}

func TestCrontabToCqGolden(t *testing.T) {
	t.Parallel()
	if st, err := os.Stat("crontab-to-cq"); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("crontab-to-cq must be mode 0755: %v", err)
	}
	out, errs, code := convert(t, "", writeCrontab(t, sampleCrontab))
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if out != sampleOutput {
		t.Errorf("output differs:\n got: %s\nwant: %s", out, sampleOutput)
		got, want := strings.Split(out, "\n"), strings.Split(sampleOutput, "\n")
		for i := 0; i < len(got) && i < len(want); i++ {
			if got[i] != want[i] {
				t.Fatalf("first difference, output line %d:\n got: %s\nwant: %s", i+1, got[i], want[i])
			}
		}
	}
	checkNames(t, out)
}

// TestCrontabToCqQuoting pastes each printed line into bash with a stub
// cq that reports its argv, which must be the intended one byte for byte.
func TestCrontabToCqQuoting(t *testing.T) {
	t.Parallel()
	stubs := t.TempDir()
	stub := "#!/usr/bin/env bash\nprintf '%s\\0' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(stubs, "cq"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, code := convert(t, sampleCrontab)
	lines := addLines(out)
	if code != 0 || len(lines) != len(sampleJobs) {
		t.Fatalf("exit %d, %d cq lines, want %d:\n%s", code, len(lines), len(sampleJobs), out)
	}
	for i, line := range lines {
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), "PATH="+stubs+string(os.PathListSeparator)+os.Getenv("PATH"))
		// A cwd with a file: a * left unquoted would expand to it.
		cmd.Dir = t.TempDir()
		if err := os.WriteFile(filepath.Join(cmd.Dir, "file"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash -c %s: %v", line, err)
		}
		argv := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00")
		want := sampleJobs[i]
		if len(argv) != len(want) {
			t.Errorf("line %s\n passed %q\n  want %q", line, argv, want)
			continue
		}
		for j := range want {
			if argv[j] != want[j] {
				t.Errorf("line %s\n argument %d is %q, want %q", line, j+1, argv[j], want[j])
			}
		}
	}
}

func TestCrontabToCqOptions(t *testing.T) {
	t.Parallel()
	t.Run("system", func(t *testing.T) {
		t.Parallel()
		in := "SHELL=/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n" +
			"17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly\n" +
			"@weekly backup /usr/local/bin/nightly --full\n" +
			"* * * * * nouser\n" +
			"@reboot root /usr/sbin/start\n"
		want := `# cq schedules from a crontab: review, then run these lines
# line 3: cq runs this job as the worker's user, not as root
cq schedule add cd-3 '17 * * * *' --env PATH=/usr/sbin:/usr/bin:/sbin:/bin --shell 'cd / && run-parts --report /etc/cron.hourly'
# line 4: cq runs this job as the worker's user, not as backup
cq schedule add nightly-4 '@weekly' --env PATH=/usr/sbin:/usr/bin:/sbin:/bin --shell '/usr/local/bin/nightly --full'
# line 5: not understood (skipped): * * * * * nouser
# line 6: @reboot has no equivalent in cq schedules (skipped): @reboot root /usr/sbin/start
`
		if out, errs, code := convert(t, in, "--system"); out != want || errs != "" || code != 0 {
			t.Errorf("--system: exit %d, stderr %q, printed\n%s\nwant\n%s", code, errs, out, want)
		}
	})
	t.Run("queue and prefix", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("x", 80)
		in := "@daily /usr/local/bin/backup\n0 * * * * " + long + " --now\n"
		want := `# cq schedules from a crontab: review, then run these lines
cq schedule add web1.backup-1 '@daily' --queue nightly --shell '/usr/local/bin/backup'
cq schedule add web1.` + strings.Repeat("x", 64-len("web1.")-len("-2")) + `-2 '0 * * * *' --queue nightly --shell '` + long + ` --now'
`
		for _, args := range [][]string{{"--queue", "nightly", "--prefix", "web1."}, {"--prefix=web1.", "--queue=nightly", "-"}} {
			out, errs, code := convert(t, in, args...)
			if out != want || errs != "" || code != 0 {
				t.Errorf("%q: exit %d, stderr %q, printed\n%s\nwant\n%s", args, code, errs, out, want)
			}
			checkNames(t, out)
		}
		// A queue that is not a plain word is quoted.
		if out, _, _ := convert(t, in, "--queue", "night jobs"); !strings.Contains(out, " --queue 'night jobs' --shell ") {
			t.Errorf("--queue 'night jobs' printed\n%s", out)
		}
	})
	t.Run("cwd", func(t *testing.T) {
		t.Parallel()
		in := "@daily ./rotate.sh\n"
		for _, args := range [][]string{{"--cwd", "/home/cron user"}, {"--cwd=/home/cron user"}} {
			out, errs, code := convert(t, in, args...)
			if !strings.Contains(out, "cq schedule add rotate-sh-1 '@daily' --cwd '/home/cron user' --shell './rotate.sh'\n") || errs != "" || code != 0 {
				t.Errorf("%q: exit %d, stderr %q, printed\n%s", args, code, errs, out)
			}
		}
		if _, errs, code := convert(t, in, "--cwd"); code != 1 || strings.Count(errs, "\n") != 1 {
			t.Errorf("--cwd without a value: exit %d, stderr %q", code, errs)
		}
	})
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, arg := range []string{"-h", "--help"} {
			out, errs, code := convert(t, "", arg)
			if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage: crontab-to-cq") {
				t.Errorf("%s: exit %d, stderr %q, printed %q", arg, code, errs, out)
			}
		}
	})
	t.Run("bad usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"--bogus"}, {"-x"}, {"--queue"}, {"--prefix", "no spaces"}, {"a", "b"}, {filepath.Join(t.TempDir(), "missing")}} {
			out, errs, code := convert(t, sampleCrontab, args...)
			if code != 1 || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and one line on stderr", args, code, out, errs)
			}
		}
	})
	t.Run("stdin", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{nil, {"-"}, {"--", "-"}} {
			if out, errs, code := convert(t, sampleCrontab, args...); out != sampleOutput || errs != "" || code != 0 {
				t.Errorf("%q with the crontab on stdin: exit %d, stderr %q, printed\n%s", args, code, errs, out)
			}
		}
		if out, _, code := convert(t, ""); code != 0 || out != "# cq schedules from a crontab: review, then run these lines\n" {
			t.Errorf("an empty crontab: exit %d, printed %q", code, out)
		}
	})
	t.Run("time fields", func(t *testing.T) {
		t.Parallel()
		ok := []string{"0 9 * jan mon-fri", "0 9 * JAN-Jun/2 Sat", "*/15 0-23/6 1,31 * *", "00 08 * * sun"}
		bad := []string{"0 24 * * *", "0 9 * * 8", "5/10 * * * *", "0 9 0 * *", "*/0 * * * *", "1-x * * * *",
			"0 9 * * fri-mon", "1,,2 * * * *", "* * * *", "@every 5m", "@Daily"}
		for _, fields := range ok {
			if out, _, _ := convert(t, fields+" run\n"); !strings.Contains(out, "cq schedule add run-1 '"+fields+"' --shell 'run'") {
				t.Errorf("%q was not taken:\n%s", fields, out)
			}
		}
		// Cron's 7 is rewritten as 0, in every form cron takes.
		for fields, want := range map[string]string{"0 9 * * 07": "0 9 * * 0", "0 9 * * 1-7/2": "0 9 * * 1-6/2,0", "0 9 * * 0,mon-7": "0 9 * * 0,mon-6,0"} {
			out, _, _ := convert(t, fields+" run\n")
			if !strings.Contains(out, "cq schedule add run-1 '"+want+"' --shell 'run'") || !strings.Contains(out, "# line 1: day of week ") {
				t.Errorf("%q: want it written %q, with a note:\n%s", fields, want, out)
			}
		}
		for _, fields := range bad {
			if out, _, _ := convert(t, fields+" run\n"); !strings.Contains(out, "# line 1: not understood (skipped): "+fields+" run\n") {
				t.Errorf("%q was taken:\n%s", fields, out)
			}
		}
	})
}

// TestCrontabToCqRuns pastes the printed lines, twice, into bash with the
// real cq: every job becomes a schedule, and a second paste changes
// nothing.
func TestCrontabToCqRuns(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	help := exec.Command(cqBin, "schedule", "--help")
	help.Env = h.env
	if help.Run() != nil {
		t.Skip("cq schedule is not built yet")
	}
	out, err := script(t, nil, "crontab-to-cq", writeCrontab(t, sampleCrontab))
	if err != nil || out != sampleOutput {
		t.Fatalf("crontab-to-cq: %v\n%s", err, out)
	}
	for i := 0; i < 2; i++ {
		paste := exec.Command("bash", "-e")
		paste.Stdin = strings.NewReader(out)
		paste.Env = h.env
		if got, err := paste.CombinedOutput(); err != nil {
			t.Fatalf("paste %d: %v\n%s", i+1, err, got)
		}
	}
	listed := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(h.cq("schedule", "ls", "-o", "json")))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("cq schedule ls -o json: %v", err)
		}
		var many []struct{ Name string }
		var one struct{ Name string }
		if json.Unmarshal(v, &many) != nil {
			if err := json.Unmarshal(v, &one); err != nil {
				t.Fatalf("cq schedule ls -o json: %v", err)
			}
			many = append(many, one)
		}
		for _, s := range many {
			listed[s.Name] = true
		}
	}
	for _, job := range sampleJobs {
		if !listed[job[2]] {
			t.Errorf("schedule %s is not listed by cq schedule ls: %v", job[2], listed)
		}
	}
	if len(listed) != len(sampleJobs) {
		t.Errorf("cq schedule ls lists %d schedules, want %d: %v", len(listed), len(sampleJobs), listed)
	}
}
