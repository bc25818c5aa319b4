# Sourced by the benchmark scripts that time this build against an
# earlier one (bench/resnet50.sh, resnet50_convs.sh, workshop_models.sh),
# from the repository's root with $tmp set to a scratch directory.

# build_tests PKG [NAME] compiles PKG's test binary into $tmp/new.test
# (with NAME, $tmp/new.NAME.test) and, when OLD names an earlier build's
# checkout (git worktree add DIR COMMIT), that checkout's into
# $tmp/old.test (old.NAME.test); builds lists what was built, old first.
build_tests() {
	local suffix=${2:+.$2}
	go test -c -o "$tmp/new$suffix.test" "$1"
	builds=new
	if [ -n "${OLD:-}" ]; then
		(cd "$OLD" && go test -c -o "$tmp/old$suffix.test" "$1")
		builds="old new"
	fi
}

# builds_in ROUND lists the builds in the order round ROUND runs them:
# old first in odd rounds, new first in even ones, so that neither always
# meets the stretch of the machine right after the other. (In a run of
# three rounds with the new build always second, its ResNet-18 training
# at two threads read 0.77, 0.63 and 0.88× the old build's; eight runs
# alternating the order gave medians 1.01×:
# bench/results/current/order-ab-2026-11-28-zen4.txt.)
builds_in() {
	if [ "$builds" = "old new" ] && [ $(($1 % 2)) = 0 ]; then
		echo "new old"
	else
		echo "$builds"
	fi
}

# print_cpu prints the lscpu lines a result file names its CPU by.
print_cpu() {
	lscpu | grep -E 'Model name|^CPU\(s\)|CPU family|^Model:' | tr -s ' '
}
