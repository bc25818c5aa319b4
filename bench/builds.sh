# Sourced by the benchmark scripts that time this build against an
# earlier one (bench/resnet50.sh, resnet50_convs.sh, workshop_models.sh),
# from the repository's root with $tmp set to a scratch directory.

# build_tests PKG compiles PKG's test binary into $tmp/new.test and, when
# OLD names an earlier build's checkout (git worktree add DIR COMMIT),
# that checkout's into $tmp/old.test; builds lists what was built, old
# first.
build_tests() {
	go test -c -o "$tmp/new.test" "$1"
	builds=new
	if [ -n "${OLD:-}" ]; then
		(cd "$OLD" && go test -c -o "$tmp/old.test" "$1")
		builds="old new"
	fi
}

# print_cpu prints the lscpu lines a result file names its CPU by.
print_cpu() {
	lscpu | grep -E 'Model name|^CPU\(s\)|CPU family|^Model:' | tr -s ' '
}
