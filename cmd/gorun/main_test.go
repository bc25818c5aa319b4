package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExitStatusAndMessage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status int
		output []string
	}{
		{"success", []string{"-np", "2", "sh", "-c", "echo hi $RANK"}, 0, []string{"[0] hi 0", "[1] hi 1"}},
		{"a rank fails", []string{"-np", "3", "-grace", "200ms", "sh", "-c", `[ "$RANK" = 2 ] && exit 5; exec sleep 30`}, 5, []string{"rank 2 (pid", "exited with status 5", "job failed"}},
		{"a rank is killed", []string{"-np", "2", "-grace", "200ms", "sh", "-c", `[ "$RANK" = 1 ] && kill -9 $$; exec sleep 30`}, 137, []string{"rank 1 (pid", "killed by signal 9"}},
		{"timeout", []string{"-np", "2", "-timeout", "200ms", "-grace", "200ms", "sleep", "30"}, 124, []string{"timed out after 200ms"}},
		// Rank 0 sends SIGINT to gorun (its parent: run is in this process),
		// as a user's Ctrl-C would: forwarded, and 128 + 2 as shells report it.
		{"interrupted", []string{"-np", "2", "-grace", "500ms", "sh", "-c", `[ "$RANK" = 0 ] && sleep 0.5 && kill -INT $PPID; exec sleep 30`}, 130, []string{"interrupted by interrupt"}},
		{"no program", []string{"-np", "2"}, 2, []string{"usage: gorun"}},
		{"help", []string{"-h"}, 0, []string{"usage: gorun", "-max-restarts"}},
		// mpirun's -n: one line naming gorun's -np, not the usage.
		{"mistyped flag", []string{"-n", "2", "true"}, 2, []string{"gorun: unknown flag -n (did you mean -np?); \"gorun -h\" lists the flags\n"}},
		{"timeout without a unit", []string{"-timeout", "2", "true"}, 2, []string{"gorun: -timeout \"2\": want a duration with a unit, such as 30s"}},
		{"negative grace", []string{"-grace", "-1s", "true"}, 2, []string{"gorun: -grace \"-1s\": want 0 or more\n"}},
		{"bad np", []string{"-np", "0", "true"}, 2, []string{"need at least one rank"}},
		{"no nodes", []string{"-nnodes", "0", "true"}, 2, []string{"-nnodes 0: want 1 or more"}},
		{"node rank without nodes", []string{"-node-rank", "1", "true"}, 2, []string{"launch: node rank 1 outside 0…0"}},
		{"negative node rank", []string{"-nnodes", "2", "-node-rank", "-1", "-master", "127.0.0.1:1", "true"}, 2, []string{"node rank -1 outside 0…1"}},
		// A rank fails in the first two runs and succeeds in the third.
		{"restarts", []string{"-np", "2", "-grace", "200ms", "-max-restarts", "3", "sh", "-c", `echo "run $GORUN_RESTART"; [ "$RANK" = 1 ] && [ "$GORUN_RESTART" -lt 2 ] && exit 7; exit 0`}, 0,
			[]string{"[1] run 0", "exited with status 7; restarting every rank (restart 1 of 3)", "[1] run 1", "(restart 2 of 3)", "[0] run 2", "[1] run 2"}},
		{"restarts used up", []string{"-np", "2", "-grace", "200ms", "-max-restarts", "1", "sh", "-c", `[ "$RANK" = 1 ] && exit 7; exec sleep 30`}, 7,
			[]string{"job failed 2 times, 1 restarts allowed (-max-restarts): run 1: rank 1 (pid", "run 2: rank 1 (pid"}},
		{"negative restarts", []string{"-max-restarts", "-1", "true"}, 2, []string{"-max-restarts -1"}},
		// Rank 1 fails; the others finish: the job succeeds, naming it.
		{"shrink", []string{"-np", "3", "-grace", "200ms", "-on-failure", "shrink", "sh", "-c", `echo "mode $GORUN_ON_FAILURE"; [ "$RANK" = 1 ] && exit 7; sleep 0.5`}, 0,
			[]string{"[0] mode shrink", "rank 1 (pid", "exited with status 7; the others go on without it", "the job finished without 1 of its 3 ranks (-on-failure shrink): rank 1 (pid"}},
		{"shrink to none", []string{"-np", "2", "-on-failure", "shrink", "sh", "-c", `exit 3`}, 3, []string{"the others go on without it", "job failed: rank"}},
		{"restart mode", []string{"-np", "2", "-grace", "200ms", "-on-failure", "restart", "sh", "-c", `echo "mode $GORUN_ON_FAILURE"; [ "$GORUN_RESTART" = 0 ] && exit 7; exit 0`}, 0,
			[]string{"[0] mode restart", "restarting every rank (restart 1 of 3)"}},
		{"bad on-failure", []string{"-on-failure", "retry", "true"}, 2, []string{`-on-failure "retry": want abort, restart or shrink`}},
		{"abort with restarts", []string{"-on-failure", "abort", "-max-restarts", "2", "true"}, 2, []string{"a restart is not an abort"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			status := run(tc.args, nil, &out, &out)
			if status != tc.status {
				t.Errorf("status %d, want %d\n%s", status, tc.status, out.String())
			}
			for _, want := range tc.output {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if status == 2 && tc.name != "no program" && strings.Contains(out.String(), "usage: gorun") {
				t.Errorf("a bad command line printed the whole usage:\n%s", out.String())
			}
		})
	}
}
