R=/tmp/r7; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-b/scripts/replay_lat.py > $R/replay_lat.log 2>&1; echo "rc=$? at ${SECONDS}s"; grep -- "->" $R/replay_lat.log; tail -3 $R/replay_lat.log
