# What the A/B scripts (collectives_ab.sh, builds_ab.sh, env_ab.sh) share,
# sourced by each: argument checks that exit with status 2 and a message
# naming the script and what it cannot use, and the line naming the
# machine at the head of their output.

# want_rounds exits unless $1 is a whole number, at least 1.
want_rounds() {
	if ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
		echo "${0##*/}: ROUNDS '$1': want a whole number, at least 1" >&2
		exit 2
	fi
}

# want_bench exits unless $2 is an executable bench binary; $1 goes
# before it in the message (what names it, or nothing).
want_bench() {
	if [ ! -x "$2" ] || [ -d "$2" ]; then
		echo "${0##*/}: $1$2: not an executable bench binary (go build -o DIR/ ./cmd/bench)" >&2
		exit 2
	fi
}

# machine_line prints the time and the CPU: "# 2026-11-30T06:47:36Z AMD
# EPYC, family 25 model 1 (2 cores)".
machine_line() {
	echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p') ($(nproc) cores)"
}
