#!/usr/bin/env bash
# Runs the end-to-end tests (tests/e2e) as E2E_SHARDS concurrent shards (default 3) of
# one compiled test binary, against one build of the service binaries.
#
# Why shards: the e2e tests spend most of their time waiting (session timeouts, kill
# and restart, long polls), not on the CPU, so running a few at once cuts the wall time
# without starving them. Each shard is its own process with its own shared stack; every
# stack has its own Postgres database, NATS cluster id, data directory and ports, as the
# tests that start their own stacks already need.
#
# Tests are dealt to the shards in turn, in the order `-test.list` gives (source order),
# so neighbouring slow tests (the raft and transaction kill tests sit together) land in
# different shards. E2E_RUN (a regexp) limits the run to matching tests; E2E_SHARDS=1
# runs them one after another as `go test` would. Extra arguments go to every shard's
# test binary (for example -test.v). The other packages under tests/e2e (stack, testenv,
# the bench commands) run first with plain `go test`.
#
# Exit status: non-zero when any shard fails; each failed shard's output is printed.
set -euo pipefail
cd "$(dirname "$0")/../.."

shards=${E2E_SHARDS:-3}
run=${E2E_RUN:-.}
go=${GO:-go}
work=$(mktemp -d "${TMPDIR:-/tmp}/tributary-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/bin"
for s in storage-core coordinator kafka-gateway pubsub-gateway mqtt-bridge; do
	"$go" build -o "$work/bin/$s" "./services/$s/cmd/$s"
done
(cd tests/e2e && "$go" test -c -o "$work/e2e.test" .)

others=$(cd tests/e2e && "$go" list ./... | grep -v '/tests/e2e$' || true)
if [ -n "$others" ]; then
	(cd tests/e2e && "$go" test -count=1 $others)
fi

mapfile -t names < <(cd tests/e2e && "$work/e2e.test" -test.list "$run" | grep -E '^(Test|Example)')
if [ "${#names[@]}" -eq 0 ]; then
	echo "e2e: no test matches $run" >&2
	exit 1
fi
if [ "$shards" -gt "${#names[@]}" ]; then
	shards=${#names[@]}
fi

declare -a pids
start=$(date +%s)
for ((i = 0; i < shards; i++)); do
	list=()
	for ((j = i; j < ${#names[@]}; j += shards)); do
		list+=("${names[j]}")
	done
	re="^($(
		IFS='|'
		echo "${list[*]}"
	))\$"
	(
		cd tests/e2e
		t0=$(date +%s)
		rc=0
		TRIBUTARY_BIN_DIR="$work/bin" "$work/e2e.test" -test.count=1 -test.timeout=25m -test.run "$re" "$@" \
			>"$work/shard$i.log" 2>&1 || rc=$?
		echo "e2e shard $((i + 1))/$shards: ${#list[@]} tests, rc $rc, $(($(date +%s) - t0)) s" >>"$work/summary"
		exit "$rc"
	) &
	pids[i]=$!
done

failed=0
for ((i = 0; i < shards; i++)); do
	if ! wait "${pids[i]}"; then
		failed=1
		echo "=== e2e shard $((i + 1))/$shards failed; its output:"
		cat "$work/shard$i.log"
	elif [ "$#" -gt 0 ]; then
		cat "$work/shard$i.log"
	fi
done
cat "$work/summary"
echo "e2e: ${#names[@]} tests in $shards shards, $(($(date +%s) - start)) s"
exit "$failed"
