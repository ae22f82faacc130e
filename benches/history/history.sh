#!/bin/bash
# The same durable-batch workload built at several commits and run alternately, so that the
# machine's drift hits every build alike (docs/benchmarks.md, "schedule_batch across the
# project's history").
#
#   benches/history/history.sh ROUNDS JOBS BATCH COMMIT...
#
# Each commit is checked out in a worktree under $HISTORY_DIR (default /tmp/timewheel-history),
# gets batch_at_commit.rs as its example `bisect_batch`, and is built in release with one
# shared target directory; then every round runs each build once, in the order given. Stop
# other load first (a campaign: `pkill -STOP -f NAME`). The worktrees are removed at the end.
set -euo pipefail
ROUNDS=$1; JOBS=$2; BATCH=$3; shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(git -C "$HERE" rev-parse --show-toplevel)
# Names (HEAD, branches) resolved once, so that a cached build is always the commit's.
COMMITS=()
for c in "$@"; do COMMITS+=("$(git -C "$REPO" rev-parse --short "$c^{commit}")"); done
set -- "${COMMITS[@]}"
DIR=${HISTORY_DIR:-/tmp/timewheel-history}
mkdir -p "$DIR"
for c in "$@"; do
  if [ ! -x "$DIR/bin-$c" ]; then
    git -C "$REPO" worktree add -f "$DIR/$c" "$c" >/dev/null 2>&1
    mkdir -p "$DIR/$c/examples"
    cp "$HERE/batch_at_commit.rs" "$DIR/$c/examples/bisect_batch.rs"
    (cd "$DIR/$c" && CARGO_TARGET_DIR="$DIR/target" cargo build --release --quiet --example bisect_batch)
    cp "$DIR/target/release/examples/bisect_batch" "$DIR/bin-$c"
    git -C "$REPO" worktree remove --force "$DIR/$c"
  fi
done
for r in $(seq 1 "$ROUNDS"); do
  for c in "$@"; do
    echo "round $r $c $("$DIR/bin-$c" "$JOBS" "$BATCH")"
  done
done
